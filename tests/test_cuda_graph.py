"""CUDA-graph stepping (fedaudit/attacks/cuda_graph.py). On the CPU the bookkeeping runs with an emulated graph (a
replay reruns the captured body): warm-up, capture self-check, restart reset, schedule and synchronisation must give
the eager run's result. The real capture is checked against eager execution on a CUDA device (skipped without one)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.overrides import TorchFunctionMode

from fedaudit.attacks import cuda_graph
from fedaudit.attacks.loop import optimize
from fedaudit.errors import InputError, RuntimeFailure
from fedaudit.jobs import Session

from .helpers import attack_job

UNSIGNED = {"signed": False}


def _run(mode, name="lenet_b1", attack="ig", restarts=1, iterations=40, restart_batch=1, device="cpu", options=None):
    job, att, labels = attack_job(name, attack, options, {"iterations": iterations, "restarts": restarts,
                                                          "restart-batch": restart_batch},
                                  session=Session(device=device, quiet=True))
    cfg = dataclasses.replace(job.loop_config(labels), cuda_graph=mode)
    return optimize(att, cfg)


def _same(a, b):
    """Equal to float tolerance. The graphed run's Adam takes its learning rate as a float32 tensor (rewritten between
    replays), the eager one as a Python float: the last bits differ, so the comparison uses plain (unsigned) Adam
    steps, whose trajectories stay within float noise of each other; with signed steps a near-zero gradient entry
    can take the other sign and the runs part after a few dozen iterations."""
    assert a.best_restart == b.best_restart
    assert a.distance == pytest.approx(b.distance, rel=1e-3, abs=1e-6)
    assert sorted(a.restart_images) == sorted(b.restart_images)
    for r, images in a.restart_images.items():
        assert (images - b.restart_images[r]).abs().mean() < 1e-3, r
    assert (a.images - b.images).abs().mean() < 1e-3


@pytest.mark.parametrize("restarts,restart_batch", [(1, 1), (3, 1), (3, 0)])
def test_emulated_graph_reproduces_the_eager_run(restarts, restart_batch):
    """Three restarts one after another reuse the captured body (state copied in, Adam zeroed); three as one
    stacked batch capture the batched closure."""
    eager = _run("off", restarts=restarts, restart_batch=restart_batch, options=UNSIGNED)
    graphed = _run("emulate", restarts=restarts, restart_batch=restart_batch, options=UNSIGNED)
    assert eager.cuda_graph == {"captured": False, "reason": "--cuda-graph off"} or restart_batch != 1
    assert graphed.cuda_graph["captured"] and graphed.cuda_graph["reason"] is None
    _same(eager, graphed)
    # the graphed run reads the loss only at the logging points, which is where the eager run logs too
    assert [h[:2] for h in graphed.history] == [h[:2] for h in eager.history]
    assert graphed.iterations_run == eager.iterations_run == 40 * restarts
    assert (eager.restart_images[0] - eager.restart_images.get(2, eager.restart_images[0] + 1)).abs().mean() > 0.05 \
        or restarts == 1  # restarts differ: equal results are not one image repeated


def test_fedleak_emulated_graph_reproduces_the_eager_run():
    opts = {"blend": 0.3, "look-ahead": "descent", **UNSIGNED}
    _same(_run("off", attack="fedleak", options=opts, iterations=30),
          _run("emulate", attack="fedleak", options=opts, iterations=30))


def test_a_replay_that_disagrees_falls_back_to_eager(monkeypatch):
    """auto: a captured iteration that does not reproduce the eager one is dropped and the run goes on eagerly,
    with the eager result; on: the run fails."""
    eager = _run("off", options=UNSIGNED)
    real = cuda_graph._Emulated.replay

    def drifting(self):
        real(self)
        with torch.no_grad():
            for v in cuda_graph_state["state"].values():
                v.add_(0.01)

    cuda_graph_state = {}
    real_begin = cuda_graph.GraphSteps.begin

    def begin(self, state):
        out = real_begin(self, state)
        cuda_graph_state["state"] = self.state
        return out

    monkeypatch.setattr(cuda_graph._Emulated, "replay", drifting)
    monkeypatch.setattr(cuda_graph.GraphSteps, "begin", begin)
    fell_back = _run("emulate", options=UNSIGNED)
    assert not fell_back.cuda_graph["captured"] and "differs from the eager one" in fell_back.cuda_graph["reason"]
    _same(eager, fell_back)
    monkeypatch.setattr(cuda_graph.GraphSteps, "__init__", _forcing_on(cuda_graph.GraphSteps.__init__))
    with pytest.raises(RuntimeFailure, match="--cuda-graph on: capturing ig's iteration failed"):
        _run("emulate")


def test_an_unrepeatable_eager_step_is_no_failed_capture(monkeypatch):
    """On a GPU two eager runs of one step can differ (kernels that add in a varying order): the self-check allows
    for that spread, measured from a second eager run, and keeps the graph; a replay that drifts on top of it (the
    test above) still falls back."""
    real = cuda_graph.GraphSteps._body

    def jittery(self, closure, it):
        before = {k: v.detach().clone() for k, v in self.state.items()}
        loss = real(self, closure, it)
        with torch.no_grad():
            for k, v in self.state.items():  # each entry's step off by ~3% at random, on every run of the body
                v.add_((v - before[k]) * 0.03 * torch.randn_like(v))
        return loss

    monkeypatch.setattr(cuda_graph.GraphSteps, "_body", jittery)
    result = _run("emulate", iterations=8, options=UNSIGNED)
    assert result.cuda_graph["captured"], result.cuda_graph
    monkeypatch.setattr(cuda_graph, "NOISE_FACTOR", 0.0)  # the former rule, 1% of the step alone, refused it
    result = _run("emulate", iterations=8, options=UNSIGNED)
    assert not result.cuda_graph["captured"] and "two eager steps differ by" in result.cuda_graph["reason"]


def _forcing_on(init):
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.mode = "on"
    return wrapped


def test_a_diverging_restart_is_caught_at_the_next_synchronisation(monkeypatch):
    from fedaudit.attacks.ig import InvertingGradients

    real = InvertingGradients.closure

    def poisoned(self, state, it):
        loss = real(self, state, it)
        if state["x"].shape[0] == 1 and poisoned.restart == 0 and poisoned.calls >= 6:
            state["x"].grad = state["x"].grad * float("nan")  # inside the captured body: the iterate turns NaN
        poisoned.calls += 1
        return loss

    poisoned.calls, poisoned.restart = 0, 0
    real_begin = cuda_graph.GraphSteps.begin

    def begin(self, state):
        if self.state:
            poisoned.restart = 1
        return real_begin(self, state)

    monkeypatch.setattr(InvertingGradients, "closure", poisoned)
    monkeypatch.setattr(cuda_graph.GraphSteps, "begin", begin)
    result = _run("emulate", restarts=2, iterations=30)
    assert result.diverged_restarts == [0] and result.best_restart == 1


def test_where_graphs_do_not_apply():
    job, ig, _ = attack_job("lenet_b1", "ig")
    assert cuda_graph.why_not(ig, "auto") == "CUDA graphs need a CUDA device"
    assert cuda_graph.why_not(ig, "off") == "--cuda-graph off"
    with pytest.raises(InputError, match="--cuda-graph on: CUDA graphs need a CUDA device"):
        cuda_graph.why_not(ig, "on")
    _, dlg, _ = attack_job("lenet_b1", "dlg")
    assert "lbfgs" in cuda_graph.why_not(dlg, "emulate")
    _, hfgi, _ = attack_job("lenet_b4", "hfgi")
    assert "not captured" in cuda_graph.why_not(hfgi, "emulate")
    _, dip, _ = attack_job("lenet_b1", "fedleak-dip", {"width": 8})
    assert "not captured" in cuda_graph.why_not(dip, "emulate")
    with pytest.raises(InputError, match="must be one of"):
        cuda_graph.why_not(ig, "sometimes")


def test_cli_refuses_cuda_graph_on_without_cuda(cli, tmp_path):
    from .helpers import assert_one_error_line, sample

    ckpt, upd, _ = sample("lenet_b1")
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "o", "-n", "5", "--cuda-graph", "on", "--device", "cpu",
              "-q", expect=2)
    assert_one_error_line(res.stderr, "--cuda-graph on: CUDA graphs need a CUDA device")
    assert not (tmp_path / "o").exists()
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "p", "-n", "5", "--cuda-graph", "off", "-q")
    report = (tmp_path / "p" / "report.json").read_text()
    assert '"cuda_graph": "off"' in report and '"reason": "--cuda-graph off"' in report


def test_a_captured_iteration_makes_no_tensor_from_host_values(monkeypatch):
    """A CUDA capture may not copy host memory to the device: the replayed body must not build tensors from Python
    values (the input normalisation once did, every call, and no capture succeeded on a GPU)."""
    made = []

    class Log(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("tensor", "as_tensor", "from_numpy"):
                made.append(func.__name__)
            return func(*args, **(kwargs or {}))

    replay = cuda_graph._Emulated.replay

    def logged(self):
        with Log():
            replay(self)

    monkeypatch.setattr(cuda_graph._Emulated, "replay", logged)
    result = _run("emulate", iterations=8, options=UNSIGNED)
    assert result.cuda_graph["captured"] and not made, made


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,attack,restarts,restart_batch,iterations,spread", [
    ("lenet_b1", "ig", 1, 1, 60, None), ("lenet_b4", "ig", 3, 1, 60, None), ("resnet10_b4", "ig", 2, 0, 12, 0.05),
    ("lenet_b1", "fedleak", 1, 1, 12, None)])
def test_graph_replay_equals_eager_on_cuda(name, attack, restarts, restart_batch, iterations, spread):
    """The real capture: the same seeds give the eager run's images to float tolerance. FedLeak's top-k masks turn
    last-bit differences into other trajectories over tens of iterations (on an H200 at 60 iterations the distances
    were 1.2% apart, two eager runs 0.2%), so it checks 12 iterations: 3 eager warm-up ones, the capture and 8
    replays. The BN ResNet's batched restarts are not repeatable on a GPU even eagerly (two eager runs of 60
    iterations: distances 0.483 and 0.465, mean |image difference| 0.18; docs/results/throughput.md): there the
    graphed run's distance must be within ``spread`` of the eager one's (12 iterations: 0.6101 against 0.6066), a
    replay that did not step would stay near the start."""
    eager = _run("off", name, attack, restarts, iterations, restart_batch, device="cuda", options=UNSIGNED)
    graphed = _run("on", name, attack, restarts, iterations, restart_batch, device="cuda", options=UNSIGNED)
    assert graphed.cuda_graph["captured"], graphed.cuda_graph
    if spread is not None:
        assert graphed.distance == pytest.approx(eager.distance, rel=spread)
        return
    _same(eager, graphed)
