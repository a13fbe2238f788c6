"""The output layer's statistics of an aux set are computed once per model and images (fedaudit/labels/features.py):
the label methods of one reading share the pass, and a changed weight or image recomputes it."""

from __future__ import annotations

import torch

from fedaudit.labels import features
from fedaudit.labels.features import head_stats
from fedaudit.session import Aux

from .helpers import load_sample


def test_one_pass_serves_the_same_model_and_images_and_a_change_recomputes(monkeypatch):
    tm, _ = load_sample("lenet_b4")
    aux = Aux.dummies(tm.spec, 16, seed=0)
    calls = []
    real = features.output_layer_io
    monkeypatch.setattr(features, "output_layer_io", lambda *a, **k: calls.append(1) or real(*a, **k))
    h, p = head_stats(tm, aux.images, normalized=True)
    again = head_stats(tm, aux.images, normalized=True)
    assert len(calls) == 1 and again[0] is h and again[1] is p
    other = aux.images.clone()  # equal values, another tensor: not assumed to be the same images
    assert torch.equal(head_stats(tm, other, normalized=True)[1], p) and len(calls) == 2
    with torch.no_grad():
        next(tm.model.parameters()).mul_(1.5)  # a weight changed in place
    changed = head_stats(tm, aux.images, normalized=True)
    assert len(calls) == 3 and not torch.equal(changed[0], h)
    aux.images.add_(0.1)  # the images changed in place
    head_stats(tm, aux.images, normalized=True)
    assert len(calls) == 4
    latest = head_stats(tm, aux.images, normalized=True)
    latest[1].zero_()  # a caller that wrote into a result does not corrupt the next reading
    assert float(head_stats(tm, aux.images, normalized=True)[1].sum()) > 0 and len(calls) == 5


def test_a_forward_hook_on_the_model_gets_its_pass():
    tm, _ = load_sample("lenet_b4")
    aux = Aux.dummies(tm.spec, 8, seed=0)
    head_stats(tm, aux.images, normalized=True)
    seen = []
    hook = next(tm.model.children()).register_forward_hook(lambda m, i, o: seen.append(o.shape[0]))
    try:
        head_stats(tm, aux.images, normalized=True)
    finally:
        hook.remove()
    assert sum(seen) == 8


def test_the_label_evidence_makes_one_pass_for_its_methods_without_aux(monkeypatch):
    from fedaudit.labels.registry import LABEL_METHODS
    from fedaudit.session import Session
    from fedaudit.verdict.labels import label_evidence

    tm, _ = load_sample("lenet_b4")
    session = Session()
    result = LABEL_METHODS.get("idlg")().run(tm, session)
    calls = []
    real = features.output_layer_io
    monkeypatch.setattr(features, "output_layer_io", lambda *a, **k: calls.append(1) or real(*a, **k))
    evidence = label_evidence(tm, session, "idlg", result)
    assert evidence["methods_compared"] >= 2 and len(calls) == 1  # was one pass per method (fresh dummies each)
