"""The gradient distances equal their one-vector definitions, in value and in their gradient, in both forms
(per-tensor BLAS dots on the CPU, grouped foreach kernels as on CUDA)."""

from __future__ import annotations

import pytest
import torch

from fedaudit.attacks.objectives import cosine_distance, flat, l2_distance, reference_norm


def _lists(seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(6, 3, 5, 5), (6,), (16, 6, 5, 5), (16,), (10, 400), (10,)]
    a = [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_(True) for s in shapes]
    b = [torch.randn(s, generator=g, dtype=torch.float64) * 0.5 + x.detach() for s, x in zip(shapes, a)]
    return a, b


@pytest.mark.parametrize("grouped", [False, True])
def test_cosine_and_l2_equal_the_concatenated_definitions(grouped):
    a, b = _lists()
    va, vb = flat(a), flat(b)
    want_cos = 1 - (va * vb).sum() / (va.norm() * vb.norm())
    want_l2 = ((va - vb) ** 2).sum()
    got_cos = cosine_distance(a, b, reference_norm(b), grouped=grouped)
    got_l2 = l2_distance(a, b, grouped=grouped)
    assert torch.allclose(got_cos, want_cos, rtol=1e-10, atol=1e-12)
    assert torch.allclose(got_l2, want_l2, rtol=1e-10)
    for got, want in ((got_cos, want_cos), (got_l2, want_l2)):
        ga = torch.autograd.grad(got, a, retain_graph=True)
        wa = torch.autograd.grad(want, a, retain_graph=True)
        assert all(torch.allclose(x, y, rtol=1e-8, atol=1e-12) for x, y in zip(ga, wa))


def test_a_cosine_of_identical_gradients_is_zero_and_of_opposite_ones_two():
    a, _ = _lists(1)
    b = [t.detach() for t in a]
    assert abs(float(cosine_distance(a, b))) < 1e-12
    assert abs(float(cosine_distance(a, [-t for t in b], grouped=True)) - 2) < 1e-12
