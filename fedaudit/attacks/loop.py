"""The optimisation loop every attack shares: restarts, schedules, projection, progress, checkpoints, Ctrl-C.

* Restarts: each starts from a fresh seeded initialisation; the best is chosen by the attack's gradient
  distance (never by the truth). Where the attack supports it they run as one stacked batch
  (fedaudit/attacks/batched_restarts.py; ``restart_batch`` caps a batch, 1 runs them one after another).
* Divergence: a non-finite loss or iterate ends that restart (recorded) and the next one begins.
* Checkpoints: every ``checkpoint_every`` iterations the variables, the Adam state, the best result so far and
  the position (restart, iteration) are written atomically to one safetensors file; ``resume`` continues from it.
  (L-BFGS keeps no state across a resume: its curvature history is rebuilt.)
* Ctrl-C: the loop stops, scores the current iterate, and returns the best so far with ``interrupted=True``.
* CUDA graphs: on CUDA the iteration of an attack that allows it is captured once and replayed
  (fedaudit/attacks/cuda_graph.py); the loss is then read every ``log_every`` iterations instead of every one.
* Seeds: ``seed`` fixes every initialisation, so CPU runs repeat exactly.
* Movement: the best restart's images are compared with its initial images; a mean absolute pixel change below
  0.05 means the run barely moved (FedLeak at the paper's lr 1e-4 moves 0.02 in 400 iterations and 0.04 in 2,000
  and is still its initial noise; runs that reconstruct move 0.2 or more) and its result shows nothing.
* Monitor (benchmarks): ``monitor(attack, state, restart, iteration)`` is called every ``monitor_every``
  iterations; it may score the iterate against a truth the attack never sees, and returning True ends the
  restart early (a wall-clock budget).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

from fedaudit.attacks import batched_restarts, cuda_graph
from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.run_state import (  # noqa: F401  (LoopConfig, LoopResult, BARELY_MOVED: the loop's API)
    BARELY_MOVED,
    Best,
    LoopConfig,
    LoopResult,
    check_built_for,
    finite,
    images_or_none,
    progress_bar,
    restart_generator,
    score_restart,
    start_images,
)
from fedaudit.errors import InputError, RuntimeFailure
from fedaudit.io.files import read_safetensors, write_safetensors


def _save_checkpoint(cfg: LoopConfig, path: Path, state, opt, best: Best, restart: int, it: int, history) -> None:
    tensors = {f"state.{k}": v.detach() for k, v in state.items()}
    opt_scalars = {}
    if isinstance(opt, torch.optim.Adam):
        for i, s in opt.state_dict()["state"].items():
            for name, val in s.items():
                if torch.is_tensor(val) and val.numel() > 1:
                    tensors[f"opt.{i}.{name}"] = val
                else:
                    opt_scalars[f"{i}.{name}"] = float(val)
    if best.images is not None:
        tensors["best.images"] = best.images
    tensors.update({f"beststate.{k}": v for k, v in best.state.items()})
    tensors["rng"] = torch.get_rng_state()
    meta = {"fedaudit.file": "attack_checkpoint", "fedaudit.fingerprint": cfg.fingerprint,
            "fedaudit.position": json.dumps({"restart": restart, "iteration": it}),
            "fedaudit.best": json.dumps({"distance": best.distance if math.isfinite(best.distance) else None,
                                         "labels": best.labels, "restart": best.restart, "movement": best.movement}),
            "fedaudit.opt_scalars": json.dumps(opt_scalars),
            "fedaudit.history": json.dumps(history[-2000:])}
    write_safetensors(path, tensors, meta)


def _load_checkpoint(cfg: LoopConfig, path: Path):
    tensors, meta = read_safetensors(path, "checkpoint to resume")
    if meta.get("fedaudit.file") != "attack_checkpoint":
        raise InputError(f"{str(path)!r} is not an attack checkpoint")
    if meta.get("fedaudit.fingerprint") != cfg.fingerprint:
        raise InputError(f"{str(path)!r} was written by a different attack, options or update; it cannot resume this run")
    pos = json.loads(meta["fedaudit.position"])
    b = json.loads(meta["fedaudit.best"])
    best = Best(b["distance"] if b["distance"] is not None else math.inf, tensors.get("best.images"), b["labels"], b["restart"],
                 {k[len("beststate."):]: v for k, v in tensors.items() if k.startswith("beststate.")}, b.get("movement"))
    return pos, best, tensors, json.loads(meta["fedaudit.opt_scalars"]), [tuple(h) for h in json.loads(meta["fedaudit.history"])]


def _restore_adam(opt, tensors, scalars):
    sd = opt.state_dict()
    for i in range(len(sd["param_groups"][0]["params"])):
        if f"opt.{i}.exp_avg" in tensors:
            sd["state"][i] = {"step": torch.tensor(scalars[f"{i}.step"], device="cpu"), "exp_avg": tensors[f"opt.{i}.exp_avg"],
                              "exp_avg_sq": tensors[f"opt.{i}.exp_avg_sq"]}
    opt.load_state_dict(sd)


def optimize(attack: OptimizationAttack, cfg: LoopConfig) -> LoopResult:
    one_by_one = batched_restarts.why_not(attack, cfg)
    if one_by_one is None:
        return batched_restarts.optimize_batched(attack, cfg)
    t0 = time.perf_counter()
    check_built_for(attack, cfg)
    best, history, diverged = Best(), [], []
    finals: dict[int, torch.Tensor] = {}
    start_restart, start_it, resumed, saved = 0, 0, None, None
    if cfg.resume is not None:
        pos, best, saved, scalars, history = _load_checkpoint(cfg, cfg.resume)
        start_restart, start_it = pos["restart"], pos["iteration"]
        resumed = pos
        torch.set_rng_state(saved["rng"])
    iterations_run, interrupted = 0, False
    log_every = max(1, cfg.iterations // 200)
    steps = cuda_graph.steps_for(attack, cfg.cuda_graph, cfg.lr, cfg.schedule, cfg.iterations, log_every)
    with progress_bar(cfg.quiet, cfg.progress) as progress:
        task = progress.add_task(attack.name, total=cfg.iterations * (cfg.restarts - start_restart), loss="-",
                                 runs_after=cfg.runs_after)
        progress.advance(task, start_it)
        for restart in range(start_restart, cfg.restarts):
            state = attack.init_state(restart_generator(cfg.seed, restart))
            # before a resume overwrites the state: the true start (a closed form has none)
            start = start_images(attack, state)
            state, opt = steps.begin(state)  # captured runs keep the first restart's tensors (cuda_graph.py)
            first = 0
            if saved is not None and restart == start_restart:
                with torch.no_grad():
                    for k, v in state.items():
                        v.copy_(saved[f"state.{k}"])
                if isinstance(opt, torch.optim.Adam):
                    _restore_adam(opt, saved, scalars)
                first = start_it
            progress.update(task, description=f"{attack.name} restart {restart + 1}/{cfg.restarts}")
            it = first
            try:
                for it in range(first, cfg.iterations):
                    loss = steps.run(state, opt, it, attack.closure)  # None: a replay between synchronisations
                    if loss is not None:
                        loss = float(loss)
                        if not math.isfinite(loss) or not finite(state):
                            diverged.append(restart)
                            break
                    steps.project(state)
                    iterations_run += 1
                    if loss is not None and (it % log_every == 0 or it == cfg.iterations - 1):
                        history.append((restart, it, loss))
                        progress.update(task, loss=f"{loss:.4g}")
                    progress.advance(task)
                    if cfg.checkpoint_every and cfg.checkpoint_path and (it + 1) % cfg.checkpoint_every == 0:
                        _save_checkpoint(cfg, cfg.checkpoint_path, state, opt, best, restart, it + 1, history)
                    if cfg.monitor and cfg.monitor_every and ((it + 1) % cfg.monitor_every == 0 or it == cfg.iterations - 1):
                        if cfg.monitor(attack, state, restart, it + 1):
                            break
            except KeyboardInterrupt:
                interrupted = True
            if restart not in diverged and finite(state):
                best = score_restart(attack, state, restart, start, best, finals)
            if interrupted:
                break
            progress.advance(task, cfg.iterations - 1 - it)
    if best.images is None or best.labels is None:
        if interrupted:
            raise KeyboardInterrupt
        raise RuntimeFailure(f"{attack.name}: every restart diverged (non-finite loss); try a smaller --lr")
    return LoopResult(best.images, best.labels, best.distance, best.restart, iterations_run, interrupted, diverged,
                      history, time.perf_counter() - t0, resumed,
                      attack.extras(best.state) if best.state else {}, best.movement, finals,
                      restarts_one_by_one=one_by_one if cfg.restarts > 1 else None, cuda_graph=steps.status())
