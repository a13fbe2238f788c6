"""Restarts as one batch: the R restarts of a run stacked on a leading axis and optimised together, one forward and
one double backward per iteration for all of them (the engine's ``batched_gradient``: per-restart parameter
gradients under ``torch.func.vmap``, BatchNorm statistics kept per restart).

Each restart starts from the same seeded initialisation as in the sequential loop and gets the same elementwise Adam
steps, so the result equals the sequential run's up to floating-point summation order (tests/test_batched_restarts.py);
the best restart is still the one with the lowest gradient distance. When a batch does not fit in memory it is
halved until it does, and the sizes run are reported (``LoopResult.restart_batches``). Used by ``optimize`` when the
attack supports it (``why_not_batched``) and no checkpoint, resume or monitor is asked for (those keep one restart's
state at a time); ``--restart-batch 1`` forces the sequential loop, ``--restart-batch N`` caps a batch at N.

A run's proxies are stacked the same way, P x R rows against P targets (fedaudit/attacks/stacked_targets.py, which
shares ``run_group``).

``--restart-batch 0`` (the default) batches where it is faster. Measured on one CPU thread (docs/results/
throughput.md): a LeNet (62k parameters) runs 8 restarts in 2.8x one restart's time instead of 7.9x, 32 in 7.1x
instead of 33x; a CIFAR ResNet-18 (11M) runs 8 restarts in 11.5x instead of 7.9x (vmapped convolution gradients
are slower on the CPU than one batch after another). So on the CPU the default batches models up to
``CPU_BATCH_MAX_PARAMETERS`` and runs larger ones one by one; on CUDA, where one iteration is launch-bound, it
always batches.
"""

from __future__ import annotations

import time

import torch

from fedaudit.attacks import cuda_graph
from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.run_state import (
    Best,
    LoopConfig,
    LoopResult,
    check_built_for,
    finite,
    progress_bar,
    restart_generator,
    score_restart,
    start_images,
)
from fedaudit.errors import RuntimeFailure

CPU_BATCH_MAX_PARAMETERS = 1_000_000


def why_not(attack: OptimizationAttack, cfg: LoopConfig) -> str | None:
    """Why this run's restarts go one after another (None: they run as batches)."""
    if cfg.restarts < 2:
        return "one restart"
    if cfg.restart_batch == 1:
        return "--restart-batch 1"
    if cfg.resume is not None or cfg.checkpoint_every:
        return "checkpoints and resume keep one restart's state at a time"
    if cfg.monitor is not None:
        return "a monitor scores one restart at a time"
    if attack.optimizer_name != "adam":
        return f"the {attack.optimizer_name} optimiser"
    why = attack.why_not_batched()
    if why is None and cfg.restart_batch == 0 and attack.engine.device.type == "cpu":
        size = sum(t.numel() for t in attack.engine.target.tensors)
        if size > CPU_BATCH_MAX_PARAMETERS:
            why = (f"on the CPU a model of {size:,} matched parameters runs restarts faster one after another "
                   "(--restart-batch N forces batches)")
    return why


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(exc)


def optimize_batched(attack: OptimizationAttack, cfg: LoopConfig) -> LoopResult:
    t0 = time.perf_counter()
    check_built_for(attack, cfg)
    size = cfg.restarts if cfg.restart_batch <= 0 else min(cfg.restart_batch, cfg.restarts)
    best, history, diverged, batches = Best(), [], [], []
    finals: dict[int, torch.Tensor] = {}
    iterations_run, interrupted, first = 0, False, 0
    log_every = max(1, cfg.iterations // 200)
    held: dict = {}  # the stepper (eager, or a captured CUDA graph) for groups of one size
    with progress_bar(cfg.quiet, cfg.progress) as progress:
        task = progress.add_task(attack.name, total=cfg.iterations * cfg.restarts, loss="-", runs_after=cfg.runs_after)
        while first < cfg.restarts and not interrupted:
            group = list(range(first, min(first + size, cfg.restarts)))
            label = f"{attack.name} restarts {group[0] + 1}-{group[-1] + 1}/{cfg.restarts} (one batch)"
            try:
                run = run_group(attack, cfg, group, progress, task, log_every, held, label)
            except (RuntimeError, MemoryError) as exc:
                if not is_oom(exc) or size == 1:
                    raise
                size = max(1, size // 2)  # does not fit: halve the batch and run this group again
                held.clear()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                continue
            batches.append(len(group))
            states, starts, dead, steps, hist, interrupted = run
            history += [(group[i], it, loss) for i, it, loss in hist]
            iterations_run += int(steps.sum())
            diverged += [group[i] for i in dead]
            for i, restart in enumerate(group):
                if i in dead:
                    continue
                state = {k: v[i].detach() for k, v in states.items()}
                if finite(state):
                    best = score_restart(attack, state, restart, starts[i], best, finals)
            first += len(group)
    if best.images is None or best.labels is None:
        if interrupted:
            raise KeyboardInterrupt
        raise RuntimeFailure(f"{attack.name}: every restart diverged (non-finite loss); try a smaller --lr")
    return LoopResult(best.images, best.labels, best.distance, best.restart, iterations_run, interrupted,
                      sorted(diverged), history, time.perf_counter() - t0, None,
                      attack.extras(best.state) if best.state else {}, best.movement, finals, batches,
                      cuda_graph=held["steps"].status() if held else None)


def run_group(attack, cfg, group, progress, task, log_every, held: dict, label: str):
    """Optimise one stacked batch, row i starting from restart ``group[i]``'s initialisation (indices may repeat:
    stacked proxies, fedaudit/attacks/stacked_targets.py); (states, start images, diverged rows, iterations per row,
    history as (row, iteration, loss), interrupted). ``held["steps"]`` keeps the stepper between groups of one size
    (a captured graph is reused)."""
    singles = [attack.init_state(restart_generator(cfg.seed, r)) for r in group]
    starts = [start_images(attack, s) for s in singles]
    states = {k: torch.stack([s[k].detach() for s in singles]).requires_grad_(True) for k in singles[0]}
    if held.get("size") != len(group):
        held["steps"] = cuda_graph.steps_for(attack, cfg.cuda_graph, cfg.lr, cfg.schedule, cfg.iterations, log_every)
        held["size"] = len(group)
    stepper = held["steps"]
    states, opt = stepper.begin(states)
    progress.update(task, description=label)
    alive = torch.ones(len(group), dtype=torch.bool, device="cpu")  # the rows' bookkeeping, on the host
    dead: list[int] = []
    history: list[tuple[int, int, float]] = []
    steps = torch.zeros(len(group), dtype=torch.long, device="cpu")
    interrupted = False
    try:
        for it in range(cfg.iterations):
            out = stepper.run(states, opt, it, attack.batched_closure)
            if out is not None:  # None: a replay between synchronisations (cuda_graph.py), rows checked at the next
                losses = out.cpu()
                finite = torch.isfinite(losses)
                for v in states.values():
                    finite &= torch.isfinite(v.detach()).flatten(1).all(1).cpu()
                dead += torch.nonzero(alive & ~finite).flatten().tolist()  # diverged: left out of the choice (its
                alive &= finite                                           # rows cannot disturb the others')
                if not alive.any():
                    break
            stepper.project(states)
            steps += alive
            if out is not None and (it % log_every == 0 or it == cfg.iterations - 1):
                history += [(i, it, float(losses[i])) for i in range(len(group)) if alive[i]]
                progress.update(task, loss=f"{float(losses[alive].min()):.4g}")
            progress.advance(task, len(group))
    except KeyboardInterrupt:
        interrupted = True
    return states, starts, dead, steps, history, interrupted
