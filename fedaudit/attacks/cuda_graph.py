"""One attack iteration captured as a CUDA graph and replayed (``--cuda-graph auto|on|off``).

On a GPU an attack iteration is launch-bound: a CIFAR ResNet-18 Inverting Gradients step launches about 3,600
small kernels (forward, double backward, the distance over every tensor, Adam, the box projection), and its time
hardly changes from B = 4 to B = 16. Captured once and replayed, the launches cost one call (issue #22's probe on an
H100: 13.8 ms instead of 51-58 ms per iteration at B = 16; 0.46 ms instead of 7.1 ms on LeNet B = 1).

How a run uses it (``GraphSteps``; the eager path is ``EagerSteps``, both driven by fedaudit/attacks/loop.py and
fedaudit/attacks/batched_restarts.py):

* The body of an iteration is the attack's closure (which leaves the step direction in ``.grad``), a *capturable*
  Adam step whose learning rate is a device tensor (the schedule writes it between replays, never inside), and the
  projection.
* The first ``WARMUP`` iterations run eagerly on a side stream (cuDNN picks its algorithms, Adam builds its state,
  lazily computed constants such as the target's norm are cached): they are real iterations of the run.
* Self-check: at the first captured iteration the body is also run eagerly, twice, from the same state, the state
  is put back, the graph is captured and replayed, and the replay must agree with the first eager result (mean
  |difference| at most 1% of the step's mean |change| plus three times the two eager results' own difference, which
  is 0 where eager steps are repeatable). Otherwise, or when capture raises, ``auto`` goes on eagerly with the same
  optimiser and says why in the report; ``on`` stops with a runtime failure. The check costs two extra iterations
  per run.
* Restarts reuse the captured graph: a new restart's initial values are copied into the captured tensors and the
  Adam state is zeroed in place (a fresh Adam).
* The host reads the loss and checks the iterate every ``sync_every`` iterations (the loop's logging interval) and
  at the last iteration, not every iteration: a non-finite restart is noticed at the next such point. Checkpoints,
  the monitor and Ctrl-C read the state between replays, as in the eager loop.

Which attacks: those whose iteration neither depends on the iteration number nor reads values back to the host
(``OptimizationAttack.why_not_graphed``): ``ig`` and ``fedleak``. ``auto`` (the default) captures where that holds and
the run is on CUDA. ``torch.compile`` is no alternative here: it does not compile a step that differentiates
through a gradient (docs/results/throughput.md).

``emulate`` (tests only, any device): the same bookkeeping with a "graph" that re-runs the body on each replay, so
the warm-up, self-check, restart reset, schedule and synchronisation logic is tested on the CPU.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

import torch

from fedaudit.attacks.base import OptimizationAttack, lr_factor
from fedaudit.errors import InputError, RuntimeFailure

MODES = ("auto", "on", "off")
WARMUP = 3  # eager iterations before capture (side stream on CUDA)
# The replayed step may differ from the eager one by at most 1% of the step's size (mean |.|) plus NOISE_FACTOR
# times the gap between two eager runs of the same step: on a GPU an eager step is not repeatable where cuDNN's
# kernels add in a varying order (FedLeak on ResNet-18 B = 16 on an H200: the replay was 1.02% of the step away,
# docs/results/throughput.md), and that must not count as a broken capture. A capture that misses an update (a stale
# constant, a host copy) is off by the order of the step itself.
AGREEMENT = 0.01
NOISE_FACTOR = 3.0


def why_not(attack: OptimizationAttack, mode: str) -> str | None:
    """Why this run's iterations are not captured (None: they are). ``--cuda-graph on`` where they cannot be is
    a usage error."""
    if mode not in (*MODES, "emulate"):
        raise InputError(f"--cuda-graph must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "off":
        return "--cuda-graph off"
    why = None
    if mode != "emulate" and attack.engine.device.type != "cuda":
        why = "CUDA graphs need a CUDA device"
    elif attack.optimizer_name != "adam":
        why = f"the {attack.optimizer_name} optimiser is not captured"
    else:
        why = attack.why_not_graphed()
    if why is not None and mode == "on":
        raise InputError(f"--cuda-graph on: {why}")
    return why


def contiguous_grads(opt: torch.optim.Optimizer, loss: Any) -> Any:
    """``loss``, with every parameter's ``.grad`` made contiguous: L-BFGS flattens them with ``view(-1)``, which a
    gradient that reaches the images through a transposed layout (a ViT's patch embedding) refused ("view size is
    not compatible with input tensor's size and stride": DLG on vit-tiny ended in exit 3, issue 86's held-out grid)."""
    for group in opt.param_groups:
        for p in group["params"]:
            if p.grad is not None and not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
    return loss


class EagerSteps:
    """Every iteration run as Python calls it and synchronised (the loss read, the iterate checkable)."""

    def __init__(self, attack: OptimizationAttack, lr: float, schedule: str, total: int, reason: str | None = None):
        self.attack, self.lr, self.schedule, self.total = attack, lr, schedule, total
        self.reason = reason  # why not captured (reported)

    def begin(self, state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.optim.Optimizer]:
        return state, self.attack.optimizer(state, self.lr)

    def run(self, state, opt, it: int, closure: Callable) -> Any:
        """One iteration without the projection (the caller checks the loss first): the loss, NaN when the
        closure returned none."""
        for group in opt.param_groups:
            group["lr"] = self.lr * lr_factor(self.schedule, it, self.total)
        loss = opt.step(lambda: contiguous_grads(opt, closure(state, it)))
        return math.nan if loss is None else loss

    def project(self, state) -> None:
        self.attack.project(state)

    def status(self) -> dict[str, Any]:
        return {"captured": False, "reason": self.reason}


class _CudaGraph:
    """A captured body: ``replay()`` reruns its kernels; ``output`` is the body's (static) return value."""

    def __init__(self, fn: Callable[[], torch.Tensor]):
        self.graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(self.graph):
            self.output = fn()

    def replay(self) -> None:
        self.graph.replay()


class _Emulated:
    """The CPU stand-in for tests: replay runs the body again and writes its result into ``output``."""

    def __init__(self, fn: Callable[[], torch.Tensor]):
        self.fn = fn
        self.output: Any = None

    def replay(self) -> None:
        out = self.fn().detach()
        if self.output is None:
            self.output = out.clone()
        else:
            self.output.copy_(out)


class GraphSteps(EagerSteps):
    """Warm-up, capture with a self-check, then replays (see the module docstring)."""

    def __init__(self, attack: OptimizationAttack, lr: float, schedule: str, total: int, mode: str, sync_every: int):
        super().__init__(attack, lr, schedule, total)
        self.mode, self.sync_every = mode, max(1, sync_every)
        self.emulated = mode == "emulate"
        self.device = attack.engine.device
        self.state: dict[str, torch.Tensor] = {}  # the captured tensors (the first restart's), once begun
        self.opt: Any = None  # capturable Adam over them
        self.graph: _CudaGraph | _Emulated | None = None
        self.warm = 0
        self.fell_back: str | None = None
        self.current_lr: float | None = None
        self.stream = torch.cuda.Stream(self.device) if not self.emulated else None

    def _stream(self):
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def _join(self) -> None:
        if self.stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)

    # --- state -----------------------------------------------------------------------------------------------------
    def begin(self, state):
        """The tensors the graph works on: the first restart's own; later restarts' values are copied into them and
        Adam's state is zeroed in place (a fresh Adam, the same memory)."""
        if not self.state:
            self.state = state
            capturable = not self.emulated
            # capturable Adam keeps its step count on the device; a tensor lr is rewritten between replays
            self.opt = torch.optim.Adam(list(state.values()), lr=torch.tensor(self.lr, device=self.device),
                                        capturable=capturable, foreach=None if capturable else False)
            return self.state, self.opt
        with torch.no_grad():
            for k, v in state.items():
                self.state[k].copy_(v)
            for st in self.opt.state.values():
                for t in st.values():
                    if torch.is_tensor(t):
                        t.zero_()
        return self.state, self.opt

    def _snapshot(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        tensors = list(self.state.values()) + [t for st in self.opt.state.values() for t in st.values() if torch.is_tensor(t)]
        return [(t, t.detach().clone()) for t in tensors]

    @staticmethod
    def _restore(snapshot) -> None:
        with torch.no_grad():
            for t, saved in snapshot:
                t.copy_(saved)

    # --- one iteration -------------------------------------------------------------------------------------------
    def _body(self, closure: Callable, it: int) -> torch.Tensor:
        loss = closure(self.state, it)
        self.opt.step()
        self.attack.project(self.state)
        return loss.detach() if torch.is_tensor(loss) else torch.tensor(math.nan, device=self.device)

    def _set_lr(self, it: int) -> None:
        lr = self.lr * lr_factor(self.schedule, it, self.total)
        if lr != self.current_lr:
            for group in self.opt.param_groups:
                group["lr"].fill_(lr)
            self.current_lr = lr

    def _eager(self, closure: Callable, it: int) -> torch.Tensor:
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))  # see the lr and state written before
        with self._stream():
            loss = self._body(closure, it)
        self._join()
        return loss

    def _capture(self, closure: Callable, it: int) -> torch.Tensor:
        """Iteration ``it``: eager once from a snapshot, then captured and replayed from the same snapshot; keeps
        the graph if both agree, else goes on eagerly (``auto``) or fails (``on``)."""
        before = self._snapshot()
        start = {k: saved for k, (_, saved) in zip(self.state, before)}  # the variables come first in the snapshot

        def eager_step() -> dict[str, torch.Tensor]:
            self._eager(closure, it)
            stepped = {k: v.detach().clone() for k, v in self.state.items()}
            self._restore(before)
            return stepped

        def apart(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
            return math.fsum(float((a[k] - b[k]).abs().mean()) for k in self.state)

        expected = eager_step()
        noise = apart(expected, eager_step())  # 0 where an eager step is repeatable (the CPU)
        try:
            graph = _Emulated(lambda: self._body(closure, it)) if self.emulated else \
                _CudaGraph(lambda: self._body(closure, it))
            graph.replay()
            if not self.emulated:
                torch.cuda.synchronize(self.device)
            moved = apart(expected, start)
            gap = apart(expected, {k: v.detach() for k, v in self.state.items()})
            if not gap <= AGREEMENT * moved + NOISE_FACTOR * noise + 1e-12:
                raise RuntimeError(f"the replayed iteration differs from the eager one (mean |difference| {gap:.3g} "
                                   f"against a step of {moved:.3g}; two eager steps differ by {noise:.3g})")
        except RuntimeError as exc:
            return self._fall_back(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, before, closure, it)
        self.graph = graph
        return graph.output

    def _fall_back(self, why: str, before, closure: Callable, it: int) -> torch.Tensor:
        """Capture failed or disagreed: ``on`` stops; ``auto`` runs this and every later iteration eagerly, from the
        state (variables and Adam's) before this iteration."""
        if self.mode == "on":
            raise RuntimeFailure(f"--cuda-graph on: capturing {self.attack.name}'s iteration failed: {why}")
        self.fell_back = why
        self._restore(before)
        return self._eager(closure, it)

    def run(self, state, opt, it, closure):
        """One iteration including the projection; the loss tensor on synchronised iterations (the caller then checks
        it and the iterate), None in between."""
        self._set_lr(it)
        if self.graph is not None:
            self.graph.replay()
            loss = self.graph.output
        elif self.warm < WARMUP or self.fell_back is not None:
            self.warm += 1
            loss = self._eager(closure, it)
        else:
            loss = self._capture(closure, it)
        if self.graph is not None and not (it % self.sync_every == 0 or it == self.total - 1):
            return None
        return loss

    def project(self, state) -> None:
        """Nothing: every path of ``run`` projects inside the body (the graph included)."""

    def status(self) -> dict[str, Any]:
        return {"captured": self.graph is not None, "emulated": self.emulated, "warmup": WARMUP,
                "sync_every": self.sync_every, "reason": self.fell_back}


def steps_for(attack: OptimizationAttack, mode: str, lr: float, schedule: str, total: int, sync_every: int) -> EagerSteps:
    """The stepper for a run: ``GraphSteps`` where the iteration is captured, else ``EagerSteps`` with the reason."""
    why = why_not(attack, mode)
    if why is not None:
        return EagerSteps(attack, lr, schedule, total, why)
    return GraphSteps(attack, lr, schedule, total, mode, sync_every)
