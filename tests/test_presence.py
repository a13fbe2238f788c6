"""The shown-classes test (fedaudit/labels/presence.py): a negative entry in a class's output-weight-gradient row
proves the class is in the batch where the output layer's inputs are non-negative."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fedaudit.client.capture import CaptureConfig, capture_update
from fedaudit.data.offline import MNIST_MEAN, MNIST_STD, mnist_digits
from fedaudit.io.checkpoint import Checkpoint
from fedaudit.labels import presence
from fedaudit.models import ModelSpec, build_model
from fedaudit.session import Aux
from fedaudit.threat_model import ThreatModel


def _view(arch, kwargs, labels, steps=1, optimizer=None, seed=0):
    spec = ModelSpec(arch, 10, (1, 32, 32), MNIST_MEAN, MNIST_STD, kwargs)
    torch.manual_seed(seed)
    model = build_model(spec)
    x, y = mnist_digits(pad_to=32)
    g = torch.Generator().manual_seed(seed)
    idx = torch.cat([torch.nonzero(y == c).flatten()[torch.randint(400, (1,), generator=g)] for c in labels])
    cfg = CaptureConfig(batch_size=len(labels) // steps, local_steps=steps, lr=0.05,
                        kind="delta" if steps > 1 else "gradient", bn_mode="eval", **(optimizer or {}))
    cap = capture_update(model, spec, x[idx], y[idx], cfg)
    return ThreatModel.from_tensors(Checkpoint.in_memory(spec, model), cap.tensors, cap.meta), x[:64]


@pytest.mark.parametrize("arch,kwargs", [("convnet", {"width": 8}), ("lenet", {})])  # ReLU features; sigmoid ones
def test_shown_classes_are_the_present_ones(arch, kwargs):
    """At random init every sample's own-class term is large, so the present classes are shown, and an absent class
    never is (its row is a sum of non-negative terms); the same on a two-step delta."""
    for labels, steps in (([3, 3, 3, 7, 7, 1], 1), ([0, 0, 0, 0], 1), ([2, 5, 5, 2, 9, 9, 2, 5], 2)):
        tm, probe = _view(arch, kwargs, labels, steps)
        assert presence.why_not(tm, Aux(probe, None, "images")) == []
        shown, minima = presence.shown_classes(tm)
        assert torch.nonzero(shown).flatten().tolist() == sorted(set(labels))
        assert all(float(minima[c]) >= 0 for c in range(10) if c not in labels)


def test_not_applicable_where_the_sign_argument_fails():
    tm, probe = _view("convnet", {"width": 8}, [1, 2, 2, 4])
    defended = dataclasses.replace(tm, update=dataclasses.replace(tm.update, meta=dataclasses.replace(tm.meta, defenses=[{"name": "dp"}])))
    assert "defended" in presence.why_not(defended, Aux(probe, None, "images"))[0]
    decayed, _ = _view("convnet", {"width": 8}, [1, 2, 2, 4], steps=2,
                       optimizer={"weight_decay": 1e-4})
    assert "weight decay" in presence.why_not(decayed, Aux(probe, None, "images"))[0]
    # a linear model: the output layer reads the normalised pixels, which are negative on the background
    spec = ModelSpec("tests.custom_arch:tiny", 10, (1, 32, 32), MNIST_MEAN, MNIST_STD)
    model = build_model(spec, allow_custom=True)
    cap = capture_update(model, spec, probe[:4], torch.tensor([1, 2, 2, 4]), CaptureConfig(batch_size=4))
    linear = ThreatModel.from_tensors(Checkpoint.in_memory(spec, model), cap.tensors, cap.meta)
    assert "negative values" in presence.why_not(linear, Aux(probe, None, "images"))[0]


def test_floor_and_project():
    shown = torch.tensor([False, True, True, False, True, False, False, False, False, False])
    counts = torch.tensor([3, 5, 0, 2, 0, 0, 0, 0, 0, 0])
    floored = presence.floor(counts, shown)  # the two shown classes without samples take one each, from class 0
    assert floored.tolist() == [1, 5, 1, 2, 1, 0, 0, 0, 0, 0]
    projected = presence.project(counts, shown)  # then classes 0 and 3's three samples go to 1, 2, 4 by their counts
    assert int(projected.sum()) == 10 and projected[~shown].sum() == 0 and projected.tolist()[1] >= 7
    assert all(int(projected[c]) >= 1 for c in (1, 2, 4))
    # nothing shown: nothing to project onto
    assert presence.project(counts, torch.zeros(10, dtype=torch.bool)).tolist() == counts.tolist()


def test_a_split_result_gives_way_to_one_shown_class():
    """auto's step after sample-split: where the update shows exactly one class, samples the split put on another
    class move to it; with two classes shown the split's result stands."""
    from fedaudit.labels.auto_routes.shown import by_one_shown_class
    from fedaudit.labels.base import LabelResult
    from fedaudit.session import Session

    def split(counts):
        c = torch.tensor(counts)
        return LabelResult(c.double(), c, {"strategy": "hybrid, sample split"})

    tm, probe = _view("convnet", {"width": 8}, [4, 4, 4, 4])
    session = Session(aux=Aux(probe, None, "images"))
    moved = by_one_shown_class(tm, session, split([0, 1, 0, 0, 3, 0, 0, 0, 0, 0]), None)
    assert moved.counts_int.tolist() == [0, 0, 0, 0, 4, 0, 0, 0, 0, 0]
    assert moved.diagnostics["strategy"].endswith("one shown class") and moved.diagnostics["shown_classes"]["classes"] == [4]
    tm, _ = _view("convnet", {"width": 8}, [4, 4, 4, 1])
    kept = by_one_shown_class(tm, session, split([0, 1, 0, 0, 3, 0, 0, 0, 0, 0]), None)
    assert kept.counts_int.tolist() == [0, 1, 0, 0, 3, 0, 0, 0, 0, 0] and "shown_classes" not in kept.diagnostics
