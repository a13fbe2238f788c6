"""sample-split: a small batch's output-layer update split into one label per sample, where count methods miss on a
trained model; when it cannot apply; and ``auto``'s route to it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fedaudit.client.capture import CaptureConfig
from fedaudit.jobs import LabelJob, Session
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.sample_split import SampleSplit

from .mnist_lenet import server_view

LIGHT = {"restarts": 16, "steps": 500, "refine-steps": 300}  # a tenth of the default search: enough at B = 6


@pytest.fixture
def sure(digits, sure_lenet):
    """Victims, aux digits and the trained DLG LeNet of conftest (softmax spread >= 0.3)."""
    x, y, aux = digits
    return x, y, aux, sure_lenet


def _batch(sure, seed: int, b: int = 6, **cfg):
    x, y, aux, model = sure
    idx = torch.randperm(2000, generator=torch.Generator().manual_seed(70 + seed))[:b]
    tm = server_view(x[idx], y[idx], CaptureConfig(batch_size=b, bn_mode="eval", **cfg), model=model)
    return tm, torch.bincount(y[idx], minlength=10), aux


@pytest.mark.slow
def test_sample_split_counts_each_sample_where_the_class_masses_do_not(sure):
    """Random batches of 6 on a trained LeNet: the split is exact and its fit reaches the float32 noise of the update;
    LLG and bias-count, which read per-class error masses, miss 2 of 6 on both (when written)."""
    for seed in (0, 1):
        tm, truth, aux = _batch(sure, seed)
        r = LabelJob(Session(aux=aux), tm, "sample-split", LIGHT).result()
        assert r.counts_int.tolist() == truth.tolist(), seed
        assert r.diagnostics["fit"] < 1e-3 and r.diagnostics["bounds"] == [0.0, 1.0]  # sigmoid features
        for other in ("llg", "bias-count"):
            missed = int((LabelJob(Session(aux=aux), tm, other).result().counts_int - truth).clamp_min(0).sum())
            assert missed >= 1, (seed, other)


def test_sample_split_says_why_it_cannot_apply(sure):
    tm, _, aux = _batch(sure, 0, b=10)
    assert "smaller than the 10 classes" in LABEL_METHODS.get("sample-split").why_not(tm, Session(aux=aux))[0]
    tm, _, aux = _batch(sure, 0, b=4, local_steps=2, lr=0.05, kind="delta")
    assert "one-step" in " ".join(LABEL_METHODS.get("sample-split").why_not(tm, Session(aux=aux)))
    tm, _, _ = _batch(sure, 0)
    assert "auxiliary images" in " ".join(LABEL_METHODS.get("sample-split").why_not(tm, Session()))


@pytest.mark.slow
def test_auto_sends_a_trained_models_small_batch_to_sample_split(sure, monkeypatch):
    """The route (the split's search itself is the test above's; here at its light settings, for time)."""
    light = tuple(dataclasses.replace(o, default=LIGHT.get(o.name, o.default)) for o in SampleSplit.options)
    monkeypatch.setattr(SampleSplit, "options", light)
    tm, truth, aux = _batch(sure, 0)
    r = LabelJob(Session(aux=aux), tm, "auto").result()
    assert r.diagnostics["strategy"] == "hybrid, sample split" and r.diagnostics["chosen"] == "sample-split"
    assert r.counts_int.tolist() == truth.tolist()


def test_a_start_that_goes_singular_gets_an_infinite_loss_instead_of_ending_the_fit():
    """The first fit runs many starts as one batch; one whose features lose rank has no split (its system is singular).
    It must drop out with an infinite loss while the others go on: on an AMD EPYC machine float rounding sent a start
    there and the whole method (and ``auto`` with it) raised."""
    from fedaudit.labels.sample_split import _Split

    g = torch.Generator().manual_seed(0)
    b, c, m = 3, 10, 6
    grad = torch.randn(c, b, dtype=torch.float64, generator=g) @ torch.randn(b, m + 1, dtype=torch.float64, generator=g)
    split = _Split(grad, torch.randn(c, m + 1, dtype=torch.float64, generator=g), b, None, None)
    a = split.affine(torch.randn(4, b, b, dtype=torch.float64, generator=g))
    a[2] = a[2, :1].expand(b, b)  # three equal features: rank one
    loss, _ = split.loss(a)
    assert torch.isinf(loss[2]) and bool(torch.isfinite(loss[[0, 1, 3]]).all())
    fitted = split.fit(a, 5, 0.05)  # the others still move
    assert not torch.equal(fitted[0], a[0]) and bool(torch.isfinite(split.loss(fitted)[0][[0, 1, 3]]).all())


def test_split_loss_reads_the_nearest_vertex_in_one_pass_over_the_classes():
    """The label-free loss (each row's squared distance to its nearest simplex vertex) is read as |q|^2 - 2 max q + 1,
    O(C) a row: equal to the distance to every vertex's minimum, which at C = 1000 would hold C^2 entries a row."""
    from fedaudit.labels.sample_split import _Split

    gen = torch.Generator().manual_seed(0)
    for b, c, m in ((4, 10, 20), (6, 100, 40)):
        g = torch.randn(c, b, generator=gen, dtype=torch.double) @ torch.randn(b, m + 1, generator=gen,
                                                                               dtype=torch.double)
        split = _Split(g, torch.randn(c, m + 1, generator=gen, dtype=torch.double), b, None, None)
        a = split.affine(torch.randn(8, b, b, generator=gen, dtype=torch.double))
        loss, q = split.loss(a)
        every_vertex = ((q[:, :, None, :] - split.eye) ** 2).sum(-1).min(-1).values.sum(-1)
        assert torch.isfinite(loss).all()
        assert torch.allclose(loss, every_vertex, rtol=1e-12, atol=1e-12)


def test_a_start_gone_non_finite_is_one_failed_start_not_the_end_of_the_search():
    """Issue 90: on an AMD CPU one start's step overflowed, its features went NaN and svdvals raised ('input matrix
    contained non-finite values') through `auto`. A non-finite start now scores infinite and the others go on; a
    non-finite gradient leaves its start where it was."""
    from fedaudit.labels.sample_split import _Split

    gen = torch.Generator().manual_seed(0)
    b, c, m = 3, 5, 7
    g = torch.randn(c, m + 1, generator=gen, dtype=torch.float64)
    split = _Split(g, torch.randn(c, m + 1, generator=gen, dtype=torch.float64), b, None, None)
    a = torch.randn(4, b, b, generator=gen, dtype=torch.float64)
    a[1, 0, 0] = float("nan")
    a[2, 1, 0] = float("inf")
    loss, _ = split.loss(a)
    assert torch.isinf(loss[1]) and torch.isinf(loss[2]) and torch.isfinite(loss[[0, 3]]).all()
    real = split.loss

    def overflowing(a, y=None):  # start 0's gradient overflows: a finite loss, a NaN derivative
        loss, q = real(a, y)
        poison = torch.sqrt(0 * a[0].sum())  # 0, with derivative 0 * inf = NaN
        return loss + torch.where(torch.arange(len(loss)) == 0, poison, 0), q

    split.loss = overflowing
    fitted = split.fit(a[[0, 3]], steps=5, lr=0.05)
    assert torch.isfinite(fitted).all()
