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
    assert abs(float(cosine_distance(a, b).detach())) < 1e-12
    assert abs(float(cosine_distance(a, [-t for t in b], grouped=True).detach()) - 2) < 1e-12


def test_hfgi_objective_with_dropout_equals_the_gathered_one_vector_form():
    """HFGI zeroes dropped entries in both gradients instead of gathering the kept ones into one vector."""
    from fedaudit.attacks import ATTACKS
    from fedaudit.attacks.engine import GradientEngine
    from fedaudit.io.truth import load_truth
    from fedaudit.models.normalize import denormalize, normalize
    from fedaudit.threat_model import load_threat_model

    from .helpers import sample

    tm = load_threat_model(*sample("lenet_b4")[:2])
    truth = load_truth(sample("lenet_b4")[2])
    engine = GradientEngine(tm)
    cls = ATTACKS.get("hfgi")
    attack = cls(tm, engine, truth.labels, cls.parse_options({"dropout": 0.3, "tv": 0.0}), 4)
    attack.iterations = 100
    xn = normalize(torch.rand(4, *tm.spec.input_shape, generator=torch.Generator().manual_seed(1)), tm.spec)
    got = attack.objective(xn, 99, torch.Generator().manual_seed(7))
    names = attack.matched(99)
    g = engine.gradient(denormalize(xn, tm.spec), attack.labels, names=names)
    t = [engine.target.tensors[engine.target.names.index(k)] for k in names]
    gen = torch.Generator().manual_seed(7)
    masks = [torch.rand(a.shape, generator=gen) > 0.3 for a in g]
    a, b = flat([x[m] for x, m in zip(g, masks)]), flat([y[m] for y, m in zip(t, masks)])
    want = 1 - (a * b).sum() / (a.norm() * b.norm())
    assert 0 < float(want.detach()) < 2
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-7)
