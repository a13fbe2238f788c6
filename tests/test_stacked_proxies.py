"""Proxies attacked as one stacked batch (fedaudit/attacks/stacked_targets.py): each proxy's result equals its run on
its own, batches that run out of memory are halved by whole proxies, and where stacking does not apply the report
says why the proxies ran one after another."""

from __future__ import annotations

import pytest
import torch

from fedaudit.attacks import stacked_targets
from fedaudit.attacks.engine import Target
from fedaudit.attacks.ig import InvertingGradients
from fedaudit.attacks.objectives import cosine_distance_rows
from fedaudit.jobs import ReconstructJob, Session

from .helpers import load_sample


def _proxies(name="lenet_b4", attack="ig", proxies=2, restarts=2, restart_batch=0, iterations=20, options=None):
    """The real run and its proxies' section of the report."""
    session = Session(seed=0, quiet=True)
    tm, truth = load_sample(name, session)
    loop = {"iterations": iterations, "restarts": restarts, "restart-batch": restart_batch}
    result = ReconstructJob(session, tm, attack, options, loop, given_labels=truth.labels.tolist(),
                            proxies=proxies).run()
    return result, result.report.to_json()["evidence"]["proxies"]


def test_grouped_cosine_rows_match_each_group_against_its_own_target():
    gen = torch.Generator().manual_seed(0)
    targets = [Target(["a", "b"], [torch.randn(3, 4, generator=gen), torch.randn(5, generator=gen)]) for _ in range(3)]
    stacked = Target.stack(targets)
    rows = [torch.randn(6, 3, 4, generator=gen), torch.randn(6, 5, generator=gen)]  # 3 groups of 2 rows
    got = cosine_distance_rows(rows, stacked.tensors, stacked.norm)
    for g, t in enumerate(targets):
        want = cosine_distance_rows([r[2 * g:2 * g + 2] for r in rows], t.tensors, t.norm)
        assert torch.allclose(got[2 * g:2 * g + 2], want, atol=1e-6)
    assert torch.allclose(stacked.norm_of(1), torch.stack([t.tensors[1].norm() for t in targets]))
    with pytest.raises(ValueError):
        Target.stack([targets[0], Target(["a"], targets[1].tensors[:1])])


@pytest.mark.parametrize("attack,options", [("ig", None), ("hfgi", {"dropout": 0.3, "tv-start": 0.0})])
def test_stacked_proxies_reproduce_the_proxies_run_one_after_another(attack, options):
    """HFGI: one dropout mask per iteration for every proxy, as in each proxy's own run; its own target norms."""
    _, alone = _proxies(attack=attack, restart_batch=1, options=options)
    result, stacked = _proxies(attack=attack, options=options)
    assert alone["stacked_batches"] == [] and alone["one_by_one"] == "--restart-batch 1"
    assert stacked["stacked_batches"] == [4] and stacked["one_by_one"] is None
    assert len(stacked["measured"]) == len(alone["measured"]) == 2
    for a, b in zip(alone["measured"], stacked["measured"]):
        assert a["index"] == b["index"] and a["measured"] == b["measured"]
        assert b["psnr"] == pytest.approx(a["psnr"], abs=0.05) and b["identified"] == a["identified"]
    # the proxies differ from each other (two different public batches), so agreement is not one result twice
    psnrs = [p["psnr"] for p in stacked["measured"]]
    assert abs(psnrs[0] - psnrs[1]) > 0.05
    assert result.report.to_json()["evidence"]["verdict"]["source"] == "calibrated on 2 proxy batches"


def test_a_stacked_batch_that_runs_out_of_memory_is_halved_by_whole_proxies(monkeypatch):
    real = InvertingGradients.batched_closure
    sizes = []

    def closure(self, state, it):
        sizes.append(state["x"].shape[0])
        if state["x"].shape[0] > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return real(self, state, it)

    monkeypatch.setattr(InvertingGradients, "batched_closure", closure)
    _, section = _proxies(proxies=3, restarts=2, iterations=5)
    # the real run's 2 restarts (5 iterations), then 3 proxies x 2 restarts, which did not fit; each proxy alone did
    assert sizes[:6] == [2] * 5 + [6] and set(sizes[6:]) == {2}
    assert section["stacked_batches"] == [2, 2, 2] and len(section["measured"]) == 3


def test_proxies_run_one_after_another_where_stacking_does_not_apply(monkeypatch):
    _, section = _proxies(attack="dlg", iterations=5)
    assert section["stacked_batches"] == [] and section["one_by_one"] == "dlg matches one target per batch"
    from fedaudit.attacks import batched_restarts

    monkeypatch.setattr(batched_restarts, "CPU_BATCH_MAX_PARAMETERS", 1000)  # LeNet has more
    _, section = _proxies(iterations=5)
    assert section["stacked_batches"] == [] and "faster one after another" in section["one_by_one"]
    assert len(section["measured"]) == 2


def test_ctrl_c_during_a_stacked_batch_keeps_the_real_run(monkeypatch):
    """The real run has one restart (not batched); Ctrl-C in the proxies' stacked batch keeps it, uncalibrated."""
    real = InvertingGradients.batched_closure

    def interrupt(self, state, it):
        if it == 3:
            raise KeyboardInterrupt
        return real(self, state, it)

    monkeypatch.setattr(InvertingGradients, "batched_closure", interrupt)
    result, section = _proxies(restarts=1, iterations=10)
    assert result.interrupted and result.images.shape[0] == 4
    assert section["interrupted"] is True and section["measured"] == []
    assert result.report.to_json()["evidence"]["verdict"]["source"].startswith("uncalibrated rule")


def test_a_proxy_whose_restarts_all_diverge_is_a_warning_and_the_others_are_kept(monkeypatch):
    real = InvertingGradients.batched_closure

    def poison(self, state, it):
        loss = real(self, state, it)
        if it == 2:  # the second proxy's rows (rows 2-3 of 4) go non-finite
            with torch.no_grad():
                state["x"][2:] = float("nan")
        return loss

    monkeypatch.setattr(InvertingGradients, "batched_closure", poison)
    _, section = _proxies(iterations=6)
    assert section["stacked_batches"] == [4] and [p["index"] for p in section["measured"]] == [0]
    assert section["warnings"] == ["proxy 1 could not be measured: ig: every restart diverged (non-finite loss); "
                                   "try a smaller --lr"]


def test_why_not_is_none_only_for_runs_that_can_share_a_batch():
    session = Session(seed=0, quiet=True)
    tm, truth = load_sample("lenet_b4", session)
    job = ReconstructJob(session, tm, "ig", None, {"iterations": 3}, given_labels=truth.labels.tolist())
    cfg = job.loop_config(truth.labels.tolist())
    a, b = job.build(truth.labels.tolist()), job.build(truth.labels.tolist())
    assert stacked_targets.why_not([a], cfg) == "one proxy"
    assert stacked_targets.why_not([a, b], cfg) is None
    other = job.build(list(reversed(truth.labels.tolist())))
    if not torch.equal(other.labels, a.labels):
        assert stacked_targets.why_not([a, other], cfg) == "the proxies match different tensors or labels"


def test_each_stacked_batch_captures_its_own_graph(monkeypatch):
    """Two batches of two proxies each, with an emulated CUDA graph (a replay reruns the captured body): a graph kept
    from the first batch would match the second batch's rows against the first batch's targets."""
    import dataclasses

    from fedaudit.jobs.reconstruct import ReconstructJob as Job

    real = Job.loop_config
    sections = {}
    for mode in ("off", "emulate"):
        monkeypatch.setattr(Job, "loop_config", lambda self, labels, mode=mode: dataclasses.replace(
            real(self, labels), cuda_graph=mode))
        _, sections[mode] = _proxies(proxies=4, restarts=1, restart_batch=2, iterations=30, options={"signed": False})
    assert sections["off"]["stacked_batches"] == sections["emulate"]["stacked_batches"] == [2, 2]
    for a, b in zip(sections["off"]["measured"], sections["emulate"]["measured"], strict=True):
        assert b["psnr"] == pytest.approx(a["psnr"], abs=0.05)


def test_stderr_says_whose_progress_lines_follow(capsys):
    session = Session(seed=0, quiet=False, progress="off")
    tm, truth = load_sample("lenet_b1", session)
    ReconstructJob(session, tm, "ig", None, {"iterations": 3}, given_labels=[3], proxies=2).run()
    err = capsys.readouterr().err
    assert "fedaudit: proxies 1-2/2: 2 batches of 1 public images captured with the update's recipe, attacked " \
           "together (2 rows)" in err


def test_a_stacked_batch_that_fails_leaves_the_proxies_to_run_one_after_another(monkeypatch):
    """Issue 86: SqueezeNet's dropout made the stacked proxies fail under vmap ('called random operation while in
    randomness error mode'), and the audit ended in exit 3 with no report, the real run lost."""
    def fails(*args, **kwargs):
        raise RuntimeError("vmap: called random operation while in randomness error mode")

    monkeypatch.setattr(stacked_targets, "stack_attack", fails)
    result, proxies = _proxies()
    assert proxies["stacked_batches"] == [] and "stacked batch failed" in proxies["one_by_one"]
    assert len(proxies["measured"]) == 2  # each proxy measured on its own
    assert result.report.to_json()["evidence"]["verdict"]["source"] == "calibrated on 2 proxy batches"


def test_proxies_that_fail_whatever_the_error_keep_the_real_run(monkeypatch):
    from fedaudit.jobs import reconstruct

    def broken(*args, **kwargs):
        raise KeyError("anything a proxy might raise")

    monkeypatch.setattr(reconstruct, "run_proxies", broken)
    result, proxies = _proxies()
    assert result.images.shape[0] == 4 and "they failed (KeyError" in proxies["not_applicable"]
    assert result.report.to_json()["evidence"]["verdict"]["source"].startswith("uncalibrated rule")
