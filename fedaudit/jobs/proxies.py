"""Proxy batches: the audit's own case, measured on public images, to calibrate the truth-free verdict.

For ``--proxies P``: P batches of public images shaped like the model's input (``--aux`` images when given, else the
offline sets, fedaudit/data/public.py), each as many images as the update mixes, labelled with the labels the real
run used (so every proxy has the real batch's label multiset), captured through the same checkpoint with the update's
recipe and re-applied defenses (fedaudit/verdict/simulated_client.py), attacked by the same job (attack, options,
budget, restarts, multi-step mode) with those labels given, and measured against their known images. The real run's
estimate is then placed among them (fedaudit/verdict/calibrated.py). Cost: P more runs of the attack, run as stacked
batches where the attack's restarts would be (fedaudit/attacks/stacked_targets.py; on the CPU, LeNet's three proxies
at IG's default budget cost 2.1 runs instead of 3.0, docs/results/throughput.md; not yet measured on CUDA).

A proxy that fails to capture or to run is a warning in the report, not a failure of the audit.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol

import torch

from fedaudit.attacks import stacked_targets
from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.stacked_targets import Stacked
from fedaudit.data.public import public_images
from fedaudit.errors import InputError, NotApplicable, RuntimeFailure
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel
from fedaudit.verdict.simulated_client import recipe, recorded_chain, simulated_client


class ProxiedJob(Protocol):
    """What a run offers its proxies (fedaudit/jobs/reconstruct.py's ReconstructJob): its session and threat model,
    and the same run on another threat model with given labels."""

    session: Session
    tm: ThreatModel

    def proxy(self, session: Session, tm: ThreatModel, labels: list[int]) -> Any: ...

    def loop_config(self, labels: list[int]) -> Any: ...


def pool(job: ProxiedJob) -> tuple[torch.Tensor | None, str]:
    """The images proxies are drawn from and where they come from, or (None, why there are none)."""
    aux = job.session.aux
    shape = tuple(job.tm.spec.input_shape)
    if aux is not None and aux.kind == "images" and tuple(aux.images.shape[1:]) == shape:
        return aux.images.float().cpu(), "--aux images"
    return public_images(shape)


def run_proxies(job: ProxiedJob, labels: list[int], count: int) -> dict[str, Any]:
    """Run ``count`` proxies of ``job`` with ``labels``; ``{"proxies": [records], "warnings": [...], ...}``. The
    proxies are captured first, then attacked as stacked batches where that applies (fedaudit/attacks/
    stacked_targets.py; ``stacked_batches`` gives the rows of each), else one after another (``one_by_one`` says why)."""
    t0 = time.perf_counter()
    images, source = pool(job)
    if images is None:
        return {"requested": count, "proxies": [], "not_applicable": f"no proxies: {source}"}
    tm, session = job.tm, job.session
    chain = recorded_chain(tm)
    if chain is None:
        return {"requested": count, "proxies": [], "not_applicable": "no proxies: the update records defenses "
                                                                       "without their names and options"}
    try:
        cfg = recipe(tm)
    except InputError as e:
        return {"requested": count, "proxies": [], "not_applicable": f"no proxies: {e}"}
    y = torch.as_tensor(labels, dtype=torch.long, device="cpu")
    n = len(y)
    records: list[dict[str, Any]] = []
    warnings: list[str] = []
    interrupted = False
    captured: list[tuple[int, Any, Any]] = []  # (index, truth, the proxy's job)
    for j in range(count):
        seed = 1_000_033 * (session.seed + 1) + j
        g = torch.Generator().manual_seed(seed)
        rounds = -(-n // len(images))
        pick = torch.cat([torch.randperm(len(images), generator=g, device="cpu") for _ in range(rounds)])[:n]
        try:
            sim, truth = simulated_client(tm, session, images[pick], y, cfg, chain, seed)
            captured.append((j, truth, job.proxy(session, sim, labels)))
        except (InputError, NotApplicable, RuntimeFailure, ValueError, RuntimeError) as e:
            warnings.append(f"proxy {j} could not be measured: {e}")
        except KeyboardInterrupt:  # the real run is finished: keep it, and calibrate on the proxies done so far
            interrupted = True
            break
    attacks, stack, one_by_one = ([], None, None) if interrupted else _stacked(captured, labels, count, n, session)
    for k, (j, truth, proxy_job) in enumerate(captured):
        if interrupted:
            break
        t1 = time.perf_counter()
        optimized = None
        if stack is None:
            _say(session, f"proxy {j + 1}/{count}: {n} public images captured with the update's recipe")
        else:
            if k in stack.failed:
                warnings.append(f"proxy {j} could not be measured: {stack.failed[k]}")
                continue
            if k not in stack.results:  # Ctrl-C stopped the batch it was in
                interrupted = True
                break
            optimized = (attacks[k], stack.results[k])
        try:
            result = proxy_job.run(truth, optimized=optimized)
        except (InputError, NotApplicable, RuntimeFailure, ValueError, RuntimeError) as e:
            warnings.append(f"proxy {j} could not be measured: {e}")
            continue
        except KeyboardInterrupt:
            interrupted = True
            break
        if result.interrupted:
            interrupted = True
            break
        m, rule = result.report.metrics, result.report.verdict
        if m is None or m.band is None:
            warnings.append(f"proxy {j} gave no images to measure")
            continue
        ident = m.identification
        sim = proxy_job.tm
        shared = result.loop.seconds if optimized is not None else 0.0  # its share of the stacked batch's time
        records.append({"index": j, "measured": {"band": m.band.band, "range": m.band.range},
                        "score_db": rule.score_db if rule else None, "rule_band": rule.band if rule else None,
                        "psnr": m.stat("psnr"), "above_floor": m.psnr_above_blank,
                        "identified": ident.identified if ident else None, "of": ident.of if ident else None,
                        "seconds": round(time.perf_counter() - t1 + shared, 3),
                        "update": {"kind": sim.meta.kind, "batch_size": sim.batch_size, "local_steps": sim.meta.local_steps,
                                   "local_lr": sim.meta.local_lr, "defenses": [d.get("name") for d in sim.meta.defenses]},
                        "images": result.images, "truth": truth.images, "pairs": m.pairs()})
    if stack is not None and stack.interrupted:
        interrupted = True
    if interrupted:
        warnings.append(f"interrupted after {len(records)} of {count} proxies: the estimate is calibrated on those")
    return {"requested": count, "proxies": records, "warnings": warnings, "source": source, "interrupted": interrupted,
            "recipe": {"kind": cfg.resolved_kind(), "batch_size": cfg.batch_size, "local_steps": cfg.local_steps,
                       "lr": cfg.lr, "bn_mode": cfg.bn_mode, "defenses": [name for name, _ in chain]},
            "stacked_batches": stack.batches if stack else [], "one_by_one": one_by_one,
            "seconds": round(time.perf_counter() - t0, 3)}


def _say(session: Session, line: str) -> None:
    """A line on stderr before the proxies' own progress lines, saying whose they are."""
    if not session.quiet:
        sys.stderr.write(f"fedaudit: {line}\n")
        sys.stderr.flush()


def _stacked(captured: list[tuple[int, Any, Any]], labels: list[int], count: int, n: int, session: Session
             ) -> tuple[list[OptimizationAttack], Stacked | None, str | None]:
    """The captured proxies' attacks optimised as stacked batches, or ([], None, why they run one after another)."""
    if not captured:
        return [], None, None
    try:
        attacks = [proxy_job.build(labels) for _, _, proxy_job in captured]
    except (InputError, NotApplicable, RuntimeFailure, ValueError, RuntimeError) as e:
        return [], None, f"a proxy's attack could not be built ({e})"  # each proxy's own run says it again
    cfg = captured[0][2].loop_config(labels)
    why = stacked_targets.why_not(attacks, cfg)
    if why is not None:
        return [], None, why
    _say(session, f"proxies 1-{len(captured)}/{count}: {len(captured)} batches of {n} public images captured with the "
                  f"update's recipe, attacked together ({len(captured) * cfg.restarts} rows)")
    try:
        return attacks, stacked_targets.optimize_stacked(attacks, cfg), None
    except (RuntimeFailure, ValueError, RuntimeError) as e:  # the stacked batch failed: each proxy runs on its own
        return [], None, f"the stacked batch failed ({type(e).__name__}: {e}); the proxies ran one after another"
