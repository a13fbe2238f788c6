"""Restarts as one stacked batch (fedaudit/attacks/batched_restarts.py): the same result as one restart after
another for the same seeds, BatchNorm statistics kept per restart, batches halved when memory runs out."""

from __future__ import annotations

import pytest
import torch

from fedaudit.attacks.engine import GradientEngine
from fedaudit.io.truth import load_truth
from fedaudit.threat_model import load_threat_model

from .helpers import attack_job, sample


def _run(name, restart_batch, restarts=4, iterations=25, attack="ig", **options):
    job, attack, labels = attack_job(name, attack, options, {"iterations": iterations, "restarts": restarts,
                                                             "restart-batch": restart_batch})
    return job.optimize(attack, labels)


@pytest.mark.parametrize("name,attack", [("lenet_b1", "ig"), ("lenet_b4", "ig"), ("lenet_b4", "hfgi")])
def test_batched_restarts_reproduce_the_sequential_run(name, attack):
    """HFGI: its layer schedule, dropout masks and quantised steps per restart, with 0.3 dropout and TV from the start."""
    options = {"dropout": 0.3, "tv-start": 0.0} if attack == "hfgi" else {}
    one_by_one, batched = _run(name, 1, attack=attack, **options), _run(name, 0, attack=attack, **options)
    assert one_by_one.restart_batches == [] and batched.restart_batches == [4]
    assert batched.best_restart == one_by_one.best_restart
    assert batched.distance == pytest.approx(one_by_one.distance, rel=1e-3, abs=1e-5)
    assert sorted(batched.restart_images) == sorted(one_by_one.restart_images) == [0, 1, 2, 3]
    for r, images in one_by_one.restart_images.items():
        assert (batched.restart_images[r] - images).abs().mean() < 1e-3, r
    assert torch.allclose(batched.images, one_by_one.images, atol=2e-2)
    assert len(batched.history) == len(one_by_one.history)
    # the restarts differ from each other, so agreement above is not the same image four times
    assert (one_by_one.restart_images[0] - one_by_one.restart_images[1]).abs().mean() > 0.05


def test_batched_gradient_keeps_each_restarts_batchnorm_statistics():
    """A train-mode BN model: restart r's gradient is the one of its own batch alone (its own batch statistics)."""
    tm = load_threat_model(*sample("convnet_b8_repeated")[:2])
    labels = load_truth(sample("convnet_b8_repeated")[2]).labels
    engine = GradientEngine(tm)
    assert engine.train_bn
    x = torch.rand(3, len(labels), *tm.spec.input_shape, generator=torch.Generator().manual_seed(0))
    x[1] = x[1] * 0.2 + 0.7  # restarts with very different statistics
    batched = engine.batched_gradient(x, labels)
    rows = []
    for r in range(3):
        alone = torch.cat([t.reshape(-1) for t in engine.gradient(x[r], labels, create_graph=False)])
        got = torch.cat([t[r].reshape(-1) for t in batched])
        assert float((got - alone).norm() / alone.norm()) < 1e-4, r  # (conv biases before BN are ~1e-7 noise)
        rows.append(alone)
    mixed = torch.cat([t.reshape(-1) for t in engine.gradient(x.flatten(0, 1), labels.repeat(3), create_graph=False)])
    assert float((mixed - rows[1]).norm() / rows[1].norm()) > 0.1  # one shared batch would give another gradient


def test_a_batch_that_runs_out_of_memory_is_halved_and_reported():
    job, attack, labels = attack_job("lenet_b1", "ig", {}, {"iterations": 5, "restarts": 4})
    real = attack.batched_closure
    sizes = []

    def closure(state, it):
        sizes.append(state["x"].shape[0])
        if state["x"].shape[0] > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return real(state, it)

    attack.batched_closure = closure
    result = job.optimize(attack, labels)
    assert result.restart_batches == [2, 2]
    assert sizes[0] == 4 and set(sizes[1:]) == {2}
    assert sorted(result.restart_images) == [0, 1, 2, 3]


def test_restarts_run_one_by_one_where_a_batch_cannot_hold_them(tmp_path):
    # a checkpointed run keeps one restart's state at a time; the BN prior captures one batch's BN inputs
    job, attack, labels = attack_job("lenet_b4", "ig", {}, {"iterations": 4, "restarts": 2}, checkpoint_every=2,
                                     checkpoint_path=tmp_path / "ck.safetensors")
    assert job.optimize(attack, labels).restart_batches == []
    job, attack, labels = attack_job("resnet10_b4", "ig", {"bn-stats": "running"}, {"iterations": 2, "restarts": 2})
    assert attack.why_not_batched() is not None
    assert job.optimize(attack, labels).restart_batches == []
    assert _run("lenet_b1", 0, restarts=4, iterations=2).restart_batches == [4]
    assert _run("lenet_b1", 3, restarts=4, iterations=2).restart_batches == [3, 1]


def test_ctrl_c_during_a_batched_run_keeps_the_best_restart_so_far(monkeypatch):
    from fedaudit.attacks.ig import InvertingGradients

    real = InvertingGradients.batched_closure

    def interrupt(self, state, it):
        if it == 10:
            raise KeyboardInterrupt
        return real(self, state, it)

    monkeypatch.setattr(InvertingGradients, "batched_closure", interrupt)
    result = _run("lenet_b1", 0, restarts=3, iterations=50)
    assert result.interrupted and result.iterations_run == 30 and result.restart_batches == [3]
    assert result.images.shape[0] == 1 and sorted(result.restart_images) == [0, 1, 2]


def test_the_default_batches_on_the_cpu_only_models_up_to_the_size_where_it_is_faster(monkeypatch):
    from fedaudit.attacks import batched_restarts

    assert _run("lenet_b1", 0, restarts=2, iterations=2).restart_batches == [2]
    monkeypatch.setattr(batched_restarts, "CPU_BATCH_MAX_PARAMETERS", 1000)  # LeNet has more
    result = _run("lenet_b1", 0, restarts=2, iterations=2)
    assert result.restart_batches == [] and "faster one after another" in result.restarts_one_by_one
    assert _run("lenet_b1", 2, restarts=2, iterations=2).restart_batches == [2]  # asked for: batched anyway


def test_batched_gradient_draws_a_dropout_mask_per_restart():
    """A train-mode model with dropout (SqueezeNet's classifier, issue 86): vmap refused any random draw, so batched
    restarts and stacked proxies failed; now each restart draws its own mask, as one after another would."""
    tm = load_threat_model(*sample("convnet_b8_repeated")[:2])
    labels = load_truth(sample("convnet_b8_repeated")[2]).labels
    head = [m for m in tm.model.modules() if isinstance(m, torch.nn.Linear)][-1]
    head.register_forward_pre_hook(lambda m, inp: (torch.nn.functional.dropout(inp[0], 0.5, m.training),))
    engine = GradientEngine(tm)
    assert engine.train_bn
    x = torch.rand(2, len(labels), *tm.spec.input_shape, generator=torch.Generator().manual_seed(0))
    x[1] = x[0]  # the same images: only the dropout masks differ between the two restarts
    torch.manual_seed(0)
    g = engine.batched_gradient(x, labels)
    last = g[-1]
    assert torch.isfinite(last).all() and float((last[0] - last[1]).norm()) > 0
