"""Reconstruction: the gradient engine is exact, each attack recovers a recognisable LeNet image, and the loop's
restarts, seeds, divergence handling, checkpoints/resume and Ctrl-C behave as documented."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import torch

from fedaudit.attacks.engine import GradientEngine
from fedaudit.io.truth import load_truth
from fedaudit.jobs import Session
from fedaudit.metrics.psnr import psnr
from fedaudit.threat_model import load_threat_model

from .helpers import ROOT, assert_one_error_line, attack_job, sample, start_long_reconstruct


def _psnr_of_noise() -> float:
    truth = load_truth(sample("lenet_b1")[2]).images
    return float(psnr(torch.rand(truth.shape, generator=torch.Generator().manual_seed(0)), truth).mean())


@pytest.mark.parametrize("name", ["lenet_b1", "lenet_b4", "convnet_b8_repeated", "resnet10_b4", "mlp_mnist_withheld"])
def test_engine_reproduces_the_update_from_the_true_batch(name):
    """With the client's own images and labels, the engine's gradient equals the recorded one."""
    tm = load_threat_model(*sample(name)[:2])
    truth = load_truth(sample(name)[2])
    g = GradientEngine(tm).gradient(truth.images, truth.labels, create_graph=False)
    for got, want in zip(g, GradientEngine(tm).target.tensors):
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-4)


def test_engine_unrolls_local_steps_exactly():
    tm = load_threat_model(*sample("lenet_fedavg_k3")[:2])
    truth = load_truth(sample("lenet_fedavg_k3")[2])
    engine = GradientEngine(tm, unroll=True)
    g = engine.gradient(truth.images, truth.labels, create_graph=False)
    for got, want in zip(g, engine.target.tensors):
        assert torch.allclose(got, want, atol=2e-5, rtol=1e-3)
    merged = GradientEngine(tm).gradient(truth.images, truth.labels, create_graph=False)
    assert not all(torch.allclose(a, b, atol=2e-5, rtol=1e-3) for a, b in zip(merged, engine.target.tensors))


@pytest.mark.parametrize("attack,args,floor", [
    ("ig", ["-n", "400", "--tv", "0.2"], 18.0),
    ("dlg", ["-n", "300"], 17.0),
    ("fedleak", ["-n", "400", "--lr", "0.03", "--tv", "0.2", "--blend", "0.3", "--look-ahead", "descent"], 18.0),
])
def test_each_attack_recovers_the_lenet_cat(cli, tmp_path, attack, args, floor):
    ckpt, upd, truth = sample("lenet_b1")
    out = tmp_path / "out"
    res = cli("reconstruct", attack, ckpt, upd, "-o", out, "--truth", truth, "-q", *args)
    summary = json.loads(res.stdout)
    noise = _psnr_of_noise()
    assert summary["summary"]["psnr"]["mean"] > max(floor, noise + 6), (summary["summary"], noise)
    assert summary["labels"] == [3]
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "complete" and report["labels"]["method"] == "auto"
    assert report["attack"]["iterations_run"] == int(args[1])
    assert {p.name for p in out.iterdir()} >= {"report.json", "report.html", "grid.png", "images", "reconstruction.safetensors"}


def _run(name="lenet_b4", attack="ig", iterations=40, seed=0, restarts=None, restart_batch=None, **policy):
    """The attack (true labels, default options) and its loop result."""
    job, a, labels = attack_job(name, attack, loop={"iterations": iterations, "restarts": restarts,
                                                    "restart-batch": restart_batch},
                                session=Session(seed=seed), **policy)
    return a, job.optimize(a, labels)


def test_seeds_make_runs_repeatable():
    _, a = _run(seed=1)
    _, b = _run(seed=1)
    _, c = _run(seed=2)
    assert torch.equal(a.images, b.images) and not torch.equal(a.images, c.images)


def test_restarts_keep_the_best_by_gradient_distance(monkeypatch):
    from fedaudit.attacks.ig import InvertingGradients

    seen = []
    real = InvertingGradients.distance
    monkeypatch.setattr(InvertingGradients, "distance", lambda self, state: seen.append(real(self, state)) or seen[-1])
    _, result = _run(restarts=3, seed=4)
    assert len(seen) == 3 and len(set(seen)) == 3
    assert result.distance == min(seen) and result.best_restart == seen.index(min(seen))


def test_divergence_restarts(monkeypatch):
    from fedaudit.attacks.ig import InvertingGradients

    real = InvertingGradients.closure
    calls = {"n": 0}

    def flaky(self, state, it):
        calls["n"] += 1
        if calls["n"] == 5:  # restart 0 blows up at its 5th iteration
            return torch.tensor(float("nan"))
        return real(self, state, it)

    monkeypatch.setattr(InvertingGradients, "closure", flaky)
    _, result = _run(restarts=2, iterations=20, restart_batch=1)
    assert result.diverged_restarts == [0] and result.best_restart == 1 and result.restart_batches == []

    real_batched = InvertingGradients.batched_closure

    def flaky_batched(self, state, it):
        losses = real_batched(self, state, it)
        if it == 4:  # restart 0 of the stacked batch blows up at its 5th iteration
            losses[0] = float("nan")
        return losses

    monkeypatch.setattr(InvertingGradients, "batched_closure", flaky_batched)
    _, result = _run(restarts=2, iterations=20)
    assert result.diverged_restarts == [0] and result.best_restart == 1 and result.restart_batches == [2]
    assert sorted(result.restart_images) == [1]


def _interrupt_ig_at(monkeypatch, iteration: int):
    """Make Inverting Gradients raise KeyboardInterrupt (as Ctrl-C does) at ``iteration``; returns the real closure."""
    from fedaudit.attacks.ig import InvertingGradients

    real = InvertingGradients.closure

    def interrupt(self, state, it):
        if it == iteration:
            raise KeyboardInterrupt
        return real(self, state, it)

    monkeypatch.setattr(InvertingGradients, "closure", interrupt)
    return real


def test_resume_continues_exactly(tmp_path, monkeypatch):
    from fedaudit.attacks.ig import InvertingGradients

    _, full = _run(iterations=60, checkpoint_every=20, checkpoint_path=tmp_path / "full.ckpt.safetensors", seed=3)
    real = _interrupt_ig_at(monkeypatch, 45)
    ckpt = tmp_path / "part.ckpt.safetensors"
    attack, part = _run(iterations=60, checkpoint_every=20, checkpoint_path=ckpt, seed=3)
    assert part.interrupted and part.iterations_run == 45
    monkeypatch.setattr(InvertingGradients, "closure", real)
    # the fingerprint ties a checkpoint to its run (attack, options, labels, update, budget, seed): the same here
    _, resumed = _run(iterations=60, resume=ckpt, seed=3)
    assert resumed.resumed_from == {"restart": 0, "iteration": 40}
    assert torch.allclose(resumed.images, full.images, atol=1e-6)


def test_ctrl_c_writes_the_best_so_far(cli, tmp_path, monkeypatch):
    _interrupt_ig_at(monkeypatch, 30)
    ckpt, upd, truth = sample("lenet_b1")
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "--truth", truth, "-n", "200", "-q", expect=130)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["status"] == "interrupted" and report["attack"]["iterations_run"] == 30
    assert (tmp_path / "out" / "images" / "000.png").exists() and report["metrics"]["per_image"]
    assert json.loads(res.stdout)["status"] == "interrupted"


def test_a_run_stopped_early_is_marked_unfinished_in_its_bands(cli, tmp_path, monkeypatch):
    """Issue 90: SIGTERM at iteration 6 of 400 wrote 'low, range low .. low', confidence 0.96. An unfinished run keeps
    its point but opens its range upward, caps its confidence at a uniform guess's, and says so."""
    _interrupt_ig_at(monkeypatch, 6)
    ckpt, upd, truth = sample("lenet_b1")
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "--truth", truth, "-n", "400", "--proxies", "0",
              "-q", expect=130)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    verdict, m = report["evidence"]["verdict"], report["metrics"]
    assert verdict["range"][1] == "very_high" and verdict["confidence"] <= 0.25
    assert any("stopped after 6 of 400 iterations" in c for c in verdict["caveats"])
    assert m["risk_band_range"][1] == "very_high" and "unfinished" in m["band"]["narrow"]
    assert any("unfinished" in w for w in report["attack"]["warnings"])
    summary = json.loads(res.stdout)
    assert summary["risk_band_estimated_range"][1] == "very_high" and summary["risk_band_estimated_confidence"] <= 0.25


@pytest.mark.slow
def test_sigint_in_a_real_process(tmp_path):
    ckpt, upd, truth = sample("lenet_b1")
    # a shell that starts the suite in the background hands SIGINT down ignored; Python then never raises
    # KeyboardInterrupt, so the child gets the default disposition back
    proc, out, marker = start_long_reconstruct(tmp_path, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert json.loads((out / "report.json").read_text())["status"] == "interrupted"
    resumed = subprocess.run([sys.executable, "-m", "fedaudit", "reconstruct", "ig", str(ckpt), str(upd), "-o",
                              str(tmp_path / "again"), "-n", "10", "--resume", str(marker), "-q"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 2
    assert_one_error_line(resumed.stderr, "different attack, options or update")


@pytest.mark.slow
def test_restricted_update_and_multi_step(cli, tmp_path):
    ckpt, upd, truth = sample("mlp_mnist_withheld")
    out = cli.json(cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "a", "--truth", truth, "-n", "30", "-q"))
    assert out["status"] == "complete" and len(out["labels"]) == 8
    ckpt, upd, truth = sample("lenet_fedavg_k3")
    for mode in ("merged", "unroll"):
        out = cli.json(cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / mode, "--truth", truth, "-n", "10",
                           "--multi-step", mode, "-q"))
        report = json.loads((tmp_path / mode / "report.json").read_text())
        assert len(out["labels"]) == 12 and report["options"]["multi_step"] == mode


def test_labels_file_pipeline_fail_on_and_errors(cli, tmp_path):
    ckpt, upd, truth = sample("lenet_b1")
    cli("labels", "idlg", ckpt, upd, "-q", "-o", tmp_path / "labels.json")
    res = cli("reconstruct", "dlg", ckpt, upd, "-o", tmp_path / "a", "--labels-file", tmp_path / "labels.json",
              "--truth", truth, "-n", "300", "--fail-on", "high", "-q", expect=1)
    assert json.loads(res.stdout)["risk_band"] in ("high", "very_high")
    assert json.loads((tmp_path / "a" / "report.json").read_text())["labels"]["source"] == "file"
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "b", "--labels", "yin", "--schedule", "weekly", expect=2)
    assert_one_error_line(res.stderr, "--schedule must be one of")
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "c", "--device", "cuda:7", expect=2)
    assert_one_error_line(res.stderr, "--device cuda:7")
    assert not (tmp_path / "c").exists()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(cli, tmp_path):
    ckpt, upd, truth = sample("lenet_b1")
    out = cli.json(cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "g", "--truth", truth, "-n", "300",
                       "--device", "cuda", "-q"))
    assert out["summary"]["psnr"]["mean"] > 15


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_default_device_is_cuda_where_present(cli, tmp_path):
    """No --device: the attack runs on CUDA when present (the CPU otherwise), and the report says which."""
    ckpt, upd, _ = sample("lenet_b1")
    cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "d", "-n", "20", "-q")
    report = json.loads((tmp_path / "d" / "report.json").read_text())
    assert report["environment"]["device"].startswith("cuda")


def test_the_attack_is_built_for_the_runs_budget_and_the_loop_never_rewrites_it():
    """Issue 66: the loop settings are passed, not written back into the attack; one budget check everywhere."""
    import dataclasses

    import pytest

    from fedaudit.attacks.base import check_budget
    from fedaudit.attacks.loop import optimize
    from fedaudit.errors import InputError

    job, attack, labels = attack_job("lenet_b1", "hfgi", None, {"iterations": 6, "restarts": 1})
    assert attack.iterations == 6  # HFGI's stages are fractions of this budget, known at construction
    optimize(attack, job.loop_config(labels))
    assert attack.iterations == 6
    with pytest.raises(ValueError, match="built for 6 iterations"):
        optimize(attack, dataclasses.replace(job.loop_config(labels), iterations=7))
    for bad in ((0, None), (None, 0), (-3, 2)):
        with pytest.raises(InputError, match="--iterations and --restarts must be >= 1"):
            check_budget(*bad)
    check_budget(None, None)
