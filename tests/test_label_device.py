"""The label methods, their evidence and self-check leave no tensor unplaced (as the attacks do:
tests/test_attack_device.py): each ``labels`` run is repeated with PyTorch's default device set to ``meta``, where a
tensor made without saying where fails against the CPU's; both runs must read the same labels. Their algebra runs on
the host (``device="cpu"``: counts, seeded draws) beside the aux images' passes through the model on its device.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedaudit.jobs.labels import LabelJob
from fedaudit.session import AuxSource, Session

from .helpers import plain_and_placed, sample, timeless

SHORT = {"sample-split": {"restarts": 4, "steps": 100, "rounds": 1, "refine-steps": 50}}  # its fit, shortened


def _both(name: str, methods: list[str], self_check: int = 0) -> dict[str, list[int]]:
    checkpoint, update, _ = sample(name)
    session = Session(seed=0, quiet=True)
    tm = session.load_threat_model(checkpoint, update, AuxSource(path=Path("builtin:cifar10")))
    read = {}
    for method in methods:
        def run(method=method):
            torch.manual_seed(0)
            return LabelJob(session, tm, method, SHORT.get(method), self_check=self_check).run()

        plain, placed = plain_and_placed(run)
        assert timeless(placed) == timeless(plain), method  # the labels, the evidence, the self-check's clients
        read[method] = plain["labels"]
    return read


@pytest.mark.parametrize("methods", [["auto"], ["client-fit"], ["rlu"], ["sample-split"],
                                     ["bias-count", "fedleak", "hfgi", "idlg", "ilrg", "llg", "llg-plus", "yin", "zlg"]])
def test_every_label_method_on_a_fedsgd_gradient_leaves_no_tensor_unplaced(methods):
    read = _both("lenet_b4", methods)
    assert all(read.values())  # a set method (idlg, yin) reads the classes only
    assert all(len(read[m]) == 4 for m in ("llg", "rlu", "client-fit") if m in read)


@pytest.mark.slow
def test_a_bn_models_delta_and_the_self_check_leave_no_tensor_unplaced():
    """bn-count's BN moments and simulated batches, auto's delta routes, and the self-check's simulated clients."""
    read = _both("convnet_fedavg_bn", ["bn-count", "auto"])
    assert len(read["bn-count"]) == len(read["auto"]) > 0
    assert len(_both("lenet_b4", ["bias-count"], self_check=2)["bias-count"]) == 4
