"""Several updates of one model attacked as one stacked batch: the proxies of an audit (fedaudit/jobs/proxies.py).

A run's proxies are P updates of the same checkpoint, with the same recipe, labels, attack, options and budget; they
differ only in the gradient they match. Their restarts are stacked like one run's restarts
(fedaudit/attacks/batched_restarts.py): P x R rows, one forward and one double backward per iteration for all of them,
each row matched against its own proxy's target (``Target.stack``; ``cosine_distance_rows`` with G targets). Each row
starts from the seeded initialisation its restart has in a proxy run on its own and gets the same elementwise Adam
steps, so every proxy's result equals its own run's up to floating-point summation order
(tests/test_stacked_proxies.py). Each proxy's best restart is chosen by its own gradient distance.

Stacked where the restarts of one run would be batched (``batched_restarts.why_not`` for P x R rows: on the CPU up to
``CPU_BATCH_MAX_PARAMETERS`` matched parameters, on CUDA always; ``--restart-batch 1`` runs them one after another,
``--restart-batch N`` caps a batch at N rows) and the attack's batched iteration reads its target only through the
stacked form (``OptimizationAttack.stacks_targets``: ``ig`` and ``hfgi``; HFGI draws one dropout mask per iteration
for every proxy, as each proxy's own run would). A batch that runs out of memory is halved, by whole
proxies; at one proxy a batch, each proxy runs as its own run (which halves its restarts in turn).
"""

from __future__ import annotations

import copy
import dataclasses
import time

import torch

from fedaudit.attacks import batched_restarts
from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.engine import Target
from fedaudit.attacks.loop import optimize
from fedaudit.attacks.run_state import Best, LoopConfig, LoopResult, check_built_for, finite, progress_bar, score_restart
from fedaudit.errors import RuntimeFailure


def why_not(attacks: list[OptimizationAttack], cfg: LoopConfig) -> str | None:
    """Why these runs go one after another (None: they run as stacked batches)."""
    if len(attacks) < 2:
        return "one proxy"
    lead = attacks[0]
    if not lead.stacks_targets:
        return f"{lead.name} matches one target per batch"
    names = lead.engine.target.names
    if any(a.engine.target.names != names or not torch.equal(a.labels, lead.labels) for a in attacks):
        return "the proxies match different tensors or labels"
    rows = dataclasses.replace(cfg, restarts=len(attacks) * cfg.restarts)
    return batched_restarts.why_not(lead, rows)


def stack_attack(attacks: list[OptimizationAttack]) -> OptimizationAttack:
    """One attack whose batched iteration matches row group g against ``attacks[g]``'s target (the first attack's
    model, labels and options; the engine shares the model, only its target differs)."""
    lead = attacks[0]
    engine = copy.copy(lead.engine)
    engine.target = Target.stack([a.engine.target for a in attacks])
    return type(lead)(lead.tm, engine, lead.labels, lead.opts, lead.num_images, lead.iterations)


@dataclasses.dataclass
class Stacked:
    """What ``optimize_stacked`` did: each finished run's result, why a run gave none (every restart diverged), the
    rows of each batch run, and whether Ctrl-C stopped it (the runs of the batches finished before are kept)."""

    results: dict[int, LoopResult] = dataclasses.field(default_factory=dict)
    failed: dict[int, str] = dataclasses.field(default_factory=dict)
    batches: list[int] = dataclasses.field(default_factory=list)
    interrupted: bool = False


def optimize_stacked(attacks: list[OptimizationAttack], cfg: LoopConfig) -> Stacked:
    """Optimise every attack in ``attacks`` (``why_not`` is None) with ``cfg``'s settings."""
    for a in attacks:
        check_built_for(a, cfg)
    restarts = cfg.restarts
    per = len(attacks) if cfg.restart_batch <= 0 else max(1, cfg.restart_batch // restarts)
    out = Stacked()
    first = 0
    log_every = max(1, cfg.iterations // 200)
    with progress_bar(cfg.quiet, cfg.progress) as progress:
        task = progress.add_task(attacks[0].name, total=cfg.iterations * restarts * len(attacks), loss="-")
        while first < len(attacks) and not out.interrupted:
            group = list(range(first, min(first + per, len(attacks))))
            if len(group) == 1:  # one proxy a batch: its own run, which halves its restarts where they do not fit
                try:
                    result = optimize(attacks[first], dataclasses.replace(cfg, quiet=True))
                except KeyboardInterrupt:
                    out.interrupted = True
                    break
                except RuntimeFailure as exc:
                    out.failed[first] = str(exc)
                else:
                    out.interrupted = result.interrupted
                    if not result.interrupted:
                        out.results[first] = result
                        out.batches.append(max(result.restart_batches, default=1))
                progress.advance(task, cfg.iterations * restarts)
                first += 1
                continue
            t0 = time.perf_counter()
            rows = [r for _ in group for r in range(restarts)]
            label = f"{attacks[0].name} proxies {group[0] + 1}-{group[-1] + 1}/{len(attacks)} (one batch of {len(rows)})"
            try:  # a fresh stepper per group: a captured graph holds its group's targets
                run = batched_restarts.run_group(stack_attack([attacks[p] for p in group]), cfg, rows, progress,
                                                 task, log_every, {}, label)
            except (RuntimeError, MemoryError) as exc:
                if not batched_restarts.is_oom(exc):
                    raise
                per = max(1, len(group) // 2)  # does not fit: halve the batch (whole proxies) and run it again
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                continue
            states, starts, dead, steps, history, out.interrupted = run
            if out.interrupted:
                break
            out.batches.append(len(rows))
            seconds = (time.perf_counter() - t0) / len(group)  # each proxy's share of the batch's time
            for k, p in enumerate(group):
                try:
                    out.results[p] = _result(attacks[p], states, starts, dead, steps, history, k * restarts, restarts,
                                             len(rows), seconds)
                except RuntimeFailure as exc:
                    out.failed[p] = str(exc)
            first += len(group)
    return out


def _result(attack, states, starts, dead, steps, history, lo, restarts, rows, seconds) -> LoopResult:
    """Proxy result from its rows ``lo .. lo + restarts - 1`` of a stacked batch."""
    best = Best()
    finals: dict[int, torch.Tensor] = {}
    for r in range(restarts):
        i = lo + r
        if i in dead:
            continue
        state = {k: v[i].detach() for k, v in states.items()}
        if finite(state):
            best = score_restart(attack, state, r, starts[i], best, finals)
    if best.images is None or best.labels is None:
        raise RuntimeFailure(f"{attack.name}: every restart diverged (non-finite loss); try a smaller --lr")
    return LoopResult(best.images, best.labels, best.distance, best.restart, int(steps[lo:lo + restarts].sum()), False,
                      [i - lo for i in dead if lo <= i < lo + restarts],
                      [(i - lo, it, loss) for i, it, loss in history if lo <= i < lo + restarts], seconds, None,
                      attack.extras(best.state) if best.state else {}, best.movement, finals, [rows])
