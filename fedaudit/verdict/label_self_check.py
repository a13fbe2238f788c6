"""A truth-free estimate of how accurate a label reading is: the same method on clients simulated like this one.

Most audits have no ground truth, and a count vector says nothing about its own accuracy (on a fast-moving model's
K-step delta the methods return confident-looking counts that sit at or below an even guess's; docs/results/labels.md,
"The uniform floor"). The self-check is a parametric bootstrap (docs/methods/labels.md, "Self-check"):

1. the server's labelled aux images are split in two by class, alternately: one half stands for the victims, the
   other is the aux set the method gets (so the method never sees the simulated victims' images, as on the real
   update);
2. each simulated client holds exactly the counts the method read, drawn from the first half and shuffled into the
   update's K batches of B in random order, and trains from the checkpoint with the update's own recipe (kind, lr,
   momentum, weight decay, BatchNorm mode, withheld tensors, BN buffers carried or not; the defenses the update
   records, re-applied);
3. the method runs on each simulated upload with the same options, and its InsAcc against the simulated counts is
   measured beside the uniform floor (what an even guess that reads no update scores on those counts).

The mean InsAcc estimates the reading's accuracy near the counts it returned; its margin over the floor says whether
the update showed anything of the batch. What it cannot see: a client whose batches are ordered by class (the
simulated order is random), victims' images unlike the aux ones, and a reading far from the truth (the clients are
simulated around the reading, not around the batch). Calibration against the truth: docs/results/labels.md,
"Self-check".
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from fedaudit.errors import InputError, NotApplicable
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelResult, samples_in_update
from fedaudit.metrics.label_floor import uniform_floor
from fedaudit.metrics.labels import label_metrics
from fedaudit.progress import advance, muted
from fedaudit.session import Aux, Session
from fedaudit.threat_model import ThreatModel
from fedaudit.verdict.simulated_client import recipe, recorded_chain, simulated_client

# ``near_guess``'s rule, chosen on 30 clients (BN ConvNet, DLG LeNet, ResNet-10; trials 3-4; checked on all 34 of those
# trials once the last 4 finished) and held out on 18 others
# (docs/results/labels.md, "Self-check"): the margins over an even guess's InsAcc on the reading's and on even
# clients, and how much closer to an even split than the method's most skewed reading of an even client a reading may be
READING_MARGIN = 0.03
EVEN_MARGIN = 0.05
STRAY_SLACK = 0.1


def split_aux(aux: Aux, classes: int) -> tuple[list[torch.Tensor], Aux]:
    """Per class, the aux images at even positions (the simulated victims' pool) and an Aux of the odd ones (the
    method's); a class with a single image lends it to both halves."""
    assert aux.labels is not None
    labels = aux.labels.long().cpu()
    pools, keep = [], []
    for c in range(classes):
        idx = torch.nonzero(labels == c).flatten()
        victims, method = idx[0::2], idx[1::2]
        pools.append(victims)
        keep.append(method if len(method) else victims)
    kept = torch.cat(keep)
    return pools, Aux(aux.images[kept], labels[kept], aux.kind, aux.normalized)


def why_not(tm: ThreatModel, session: Session, result: LabelResult, method: str) -> str | None:
    """Why the self-check cannot run on this reading, or None."""
    if not LABEL_METHODS.get(method).counts_capable:
        return f"{method} recovers a set of classes, not counts"
    aux = session.aux
    if aux is None or aux.labels is None or aux.kind != "images":
        return "needs labelled aux images (--aux with labels) to simulate clients from"
    if not tm.batch_size:
        return "the update does not record its batch size"
    if tm.meta.local_steps > 1 and not tm.meta.local_lr:
        return "the update does not record its local learning rate"
    if recorded_chain(tm) is None:
        return "the update records defenses without their names and options"
    if int(result.counts_int.sum()) != samples_in_update(tm):
        return "the reading's counts do not add up to the update's samples"
    missing = [c for c, n in enumerate(result.counts_int.tolist())
               if n and not bool((aux.labels.long().cpu() == c).any())]
    if missing:
        return f"no aux images of classes {missing}, which the reading counts"
    return None


def self_check(tm: ThreatModel, session: Session, method: str, options: dict[str, Any] | None,
               result: LabelResult, clients: int) -> dict[str, Any]:
    """Re-run ``method`` on ``clients`` simulated clients holding ``result``'s counts and on ``clients`` even ones
    (module docstring)."""
    start = time.perf_counter()
    reason = why_not(tm, session, result, method)
    if reason:
        return {"clients": 0, "not_applicable": reason}
    aux = session.aux
    assert aux is not None and aux.labels is not None  # why_not checked
    c = tm.spec.num_classes
    pools, method_aux = split_aux(aux, c)
    sub = session.replace(aux=method_aux)
    try:
        cfg = recipe(tm)
    except InputError as e:
        return {"clients": 0, "not_applicable": str(e)}
    cls = LABEL_METHODS.get(method)
    chain = recorded_chain(tm) or []  # why_not checked every record names its defense
    reading = result.counts_int.long().cpu()
    total = int(reading.sum())
    simulable = torch.unique(aux.labels.long().cpu())
    simulable = simulable[(simulable >= 0) & (simulable < c)]
    out: dict[str, Any] = {"clients": clients, "reading_even_overlap": even_overlap(reading)}
    for kind in ("reading", "even"):
        per_client = []
        for i in range(clients):
            advance(i + clients * (kind == "even"), 2 * clients)
            seed = 1_000_003 * session.seed + 7919 * (kind == "even") + i + 1
            g = torch.Generator().manual_seed(seed)
            if kind == "reading":
                labels = torch.repeat_interleave(torch.arange(c, device="cpu"), reading.cpu())[torch.randperm(total, generator=g, device="cpu")]
            else:  # a random client over the classes the aux set can simulate
                labels = simulable[torch.randint(len(simulable), (total,), generator=g, device="cpu").to(simulable.device)]
            t0 = time.perf_counter()
            try:
                sim, _ = simulated_client(tm, session, aux.images[_draw(labels, pools, g)], labels, cfg, chain, seed)
                cls.check_applicable(sim, sub)
                with muted():  # the method's own steps are not the self-check's progress
                    got = cls(options).run(sim, sub)
            except (InputError, NotApplicable, ValueError, RuntimeError) as e:  # say why, do not guess
                return {"clients": 0, "not_applicable": f"{method} on a simulated client: {e}"}
            truth = torch.bincount(labels, minlength=c)
            per_client.append({"InsAcc": label_metrics(got.counts_int.cpu(), truth)["InsAcc"],
                               "floor": float(uniform_floor(truth)["InsAcc"]),
                               "even_overlap": even_overlap(got.counts_int.cpu()),
                               "seconds": round(time.perf_counter() - t0, 3),
                               **({"chosen": got.diagnostics["chosen"]} if "chosen" in got.diagnostics else {})})
        ins = [p["InsAcc"] for p in per_client]
        floors = [p["floor"] for p in per_client]
        out[kind] = {"InsAcc": statistics.mean(ins), "InsAcc_sd": statistics.stdev(ins) if len(ins) > 1 else 0.0,
                     "floor": statistics.mean(floors), "above_floor": statistics.mean(ins) - statistics.mean(floors),
                     "per_client": per_client}
    out["near_guess"] = near_guess(out)
    out.update({"InsAcc": out["reading"]["InsAcc"], "floor": out["reading"]["floor"],
                "above_floor": out["reading"]["above_floor"],
                "aux_split": {"victims": int(sum(len(p) for p in pools)), "method": int(method_aux.images.shape[0])},
                "seconds": round(time.perf_counter() - start, 3)})
    return out


def near_guess(check: dict[str, Any]) -> str | None:
    """Why the self-check finds the reading no better than a guess that reads no update, or None:

    * (a) the method clears an even guess by less than ``READING_MARGIN`` on clients that hold exactly the counts it
      read: it cannot read such a batch from such an update (heavy DP noise, a near-even reading of a large batch);
    * (b) it clears an even guess by less than ``EVEN_MARGIN`` on even clients, which it turns into skewed counts,
      and this reading is not clearly more skewed than those: its overlap with an even split is at least the lowest
      of theirs less ``STRAY_SLACK``. A skewed reading well beyond what the method makes of balanced batches (a
      Dirichlet client of the ResNet-10) is kept; one within it (the BN ConvNet's K >= 4 deltas at random init,
      where `auto` reads random clients below their floor) is called a possible misreading.
    """
    reading, even, n = check["reading"], check["even"], check["clients"]
    if reading["above_floor"] < READING_MARGIN:
        return (f"on {n} clients simulated with these counts the method read {reading['InsAcc']:.2f} of the labels "
                f"against an even guess's {reading['floor']:.2f}")
    most_skewed = min(p["even_overlap"] for p in even["per_client"])
    if even["above_floor"] < EVEN_MARGIN and check["reading_even_overlap"] >= most_skewed - STRAY_SLACK:
        return (f"on {n} simulated clients with even batches the method read {even['InsAcc']:.2f} of the labels "
                f"against an even guess's {even['floor']:.2f} and returned counts as skewed as these, so these may be "
                "a misreading")
    return None


def even_overlap(counts: torch.Tensor) -> float:
    """How much an even guess overlaps ``counts`` (1: the counts are an even split)."""
    return float(uniform_floor(counts)["InsAcc"])


def _draw(labels: torch.Tensor, pools: list[torch.Tensor], g: torch.Generator) -> torch.Tensor:
    """Aux indices for ``labels``: each class's pool in a random order, cycled where the class needs more (every
    class drawn has aux images, and the victims' half of a class is never empty: ``split_aux``)."""
    pick = torch.empty(len(labels), dtype=torch.long, device="cpu")
    for k in range(len(pools)):
        where = torch.nonzero(labels == k).flatten()
        if len(where):
            pool = pools[k]
            rounds = -(-len(where) // len(pool))
            pick[where] = torch.cat([pool[torch.randperm(len(pool), generator=g, device="cpu").to(pool.device)]
                                     for _ in range(rounds)])[:len(where)].cpu()
    return pick
