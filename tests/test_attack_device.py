"""The image attacks leave no tensor unplaced: every tensor an attack's loop makes says where (its engine's device, or
the host for its seeded draws and bookkeeping), so the loop that runs on the CPU here runs on CUDA unchanged.

As for the text attacks (tests/test_text_device.py): each run is repeated with PyTorch's default device set to
``meta``, where a tensor made without saying where fails against the CPU's; both runs must give the same images.
The label methods have their own (tests/test_label_device.py); the CUDA rows of tests/test_reconstruct.py run whole
jobs on a GPU where one is lent.
"""

from __future__ import annotations

import pytest
import torch

from fedaudit.attacks import stacked_targets
from fedaudit.jobs import ReconstructJob, Session

from .helpers import load_sample, plain_and_placed, same_tensors, timeless


def _both(name: str, attack: str, restarts: int = 1, options: dict | None = None):
    session = Session(seed=0, quiet=True)
    tm, truth = load_sample(name, session)
    labels = truth.labels.tolist()

    def run():
        torch.manual_seed(0)
        job = ReconstructJob(session, tm, attack, options, {"iterations": 3, "restarts": restarts},
                             given_labels=labels, proxies=0)
        return job.optimize(job.build(labels), labels)

    plain, placed = plain_and_placed(run)
    assert torch.equal(placed.images, plain.images) and placed.distance == plain.distance
    return plain


@pytest.mark.parametrize("attack", ["ig", "dlg", "fedleak", "fedleak-dip", "gradinversion", "hfgi", "rgla"])
def test_each_attacks_loop_leaves_no_tensor_unplaced(attack):
    assert _both("lenet_b4", attack).iterations_run >= 1


@pytest.mark.parametrize("attack,options", [("ig", None), ("ig", {"bn-stats": "running", "bn": 0.1}),
                                            ("hfgi", {"dropout": 0.3})])
def test_restarts_on_a_bn_model_leave_no_tensor_unplaced(attack, options):
    """Two restarts as one batch (the CPU batches them up to 1M parameters; the BN-statistic prior runs them one
    after another), HFGI's dropout masks."""
    assert _both("resnet10_b4", attack, restarts=2, options=options).iterations_run >= 1


def test_stacked_proxies_leave_no_tensor_unplaced():
    """Two updates' rows in one batch (fedaudit/attacks/stacked_targets.py), each against its own target."""
    session = Session(seed=0, quiet=True)
    tm, truth = load_sample("lenet_b4", session)
    labels = truth.labels.tolist()

    def run():
        torch.manual_seed(0)
        job = ReconstructJob(session, tm, "ig", None, {"iterations": 3, "restarts": 2}, given_labels=labels, proxies=0)
        attacks = [job.build(labels), job.build(labels)]
        return stacked_targets.optimize_stacked(attacks, job.loop_config(labels))

    plain, placed = plain_and_placed(run)
    assert sorted(placed.results) == sorted(plain.results) == [0, 1] and placed.batches == plain.batches
    assert all(torch.equal(plain.results[i].images, placed.results[i].images) for i in plain.results)


@pytest.mark.slow
def test_a_whole_run_with_its_labels_proxies_and_metrics_leaves_no_tensor_unplaced():
    """``reconstruct`` end to end (labels by auto, one proxy batch captured and attacked, the metrics against the
    truth, the verdict): the same report with a meta default device."""
    session = Session(seed=0, quiet=True)
    tm, truth = load_sample("lenet_b4", session)

    def run():
        torch.manual_seed(0)
        return ReconstructJob(session, tm, "ig", None, {"iterations": 3}, proxies=1).run(truth).report.to_json()

    plain, placed = plain_and_placed(run)
    assert timeless(placed) == timeless(plain)
    assert plain["metrics"]["risk_band"] and plain["evidence"]["proxies"]["measured"]


@pytest.mark.parametrize("chain", [[("dp", {"sigma": 0.01, "noise": "laplace"})], [("prune", None)],
                                   [("quantize", None)], [("soteria", None)]])
def test_the_defenses_leave_no_tensor_unplaced(chain):
    """Soteria recomputes the batch's representation through the model: the batch moves to the model's device."""
    from fedaudit.jobs.defend import DefendJob

    session = Session(seed=0, quiet=True)
    tm, truth = load_sample("lenet_b4", session)

    def run():
        job = DefendJob(session, tm, chain, batch=truth)
        return job.defended_threat_model(job.run()).gradient

    plain, placed = plain_and_placed(run)
    assert same_tensors(plain, placed)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_soteria_on_cuda_prunes_what_it_prunes_on_the_cpu():
    """The batch is moved to the model's device (it met a CUDA model on the host before)."""
    from fedaudit.jobs.defend import DefendJob

    pruned = {}
    for device in ("cpu", "cuda"):
        session = Session.create(device=device, seed=0, quiet=True)
        tm, truth = load_sample("lenet_b4", session)
        job = DefendJob(session, tm, [("soteria", None)], batch=truth)
        g = job.defended_threat_model(job.run()).gradient[f"{tm.final_layer}.weight"].cpu()
        pruned[device] = (g == 0).all(0)
    assert torch.equal(pruned["cpu"], pruned["cuda"])


@pytest.mark.parametrize("recipe", [{"batch_size": 4, "bn_mode": "eval"},
                                    {"batch_size": 2, "local_steps": 2, "lr": 0.01, "kind": "delta", "momentum": 0.9}])
def test_a_clients_capture_leaves_no_tensor_unplaced(recipe):
    """``capture`` (and every proxy batch, captured with the update's recipe): a gradient, and a BN model's delta."""
    from fedaudit.client.capture import CaptureConfig, capture_update

    session = Session(seed=0, quiet=True)
    tm, truth = load_sample("resnet10_b4", session)

    def run():
        torch.manual_seed(0)
        return capture_update(tm.model, tm.spec, truth.images, truth.labels, CaptureConfig(**recipe))

    plain, placed = plain_and_placed(run)
    assert same_tensors(plain.tensors, placed.tensors)
    assert placed.step.tolist() == plain.step.tolist()  # each image's local batch (the truth file keeps it)
