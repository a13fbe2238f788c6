"""The shown-classes step after the count routes: the classes whose output-weight-update row has a negative entry
are present for certain (fedaudit/labels/presence.py); where few are shown the batch is read as those classes only,
and every shown class gets at least one sample."""

from __future__ import annotations

from typing import Callable

import torch

from fedaudit.labels import presence
from fedaudit.labels.auto_routes import delta
from fedaudit.labels.auto_routes.calibration import FEW_SHOWN, INPUT_INDEPENDENT, SHOWN_MEAN_STEPS
from fedaudit.labels.auto_routes.common import (
    batch_statistics,
    candidate_counts,
    ensemble_counts,
    negative_entries,
    parameters,
    read_shown,
    regime,
    run_each,
)
from fedaudit.labels.base import LabelResult
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel

SHOWN_MEMBERS = ("bias-count", "zlg", "llg", "llg-plus", "rlu", "hfgi")

Few = Callable[[torch.Tensor, dict], "LabelResult | None"]


def by_shown_classes(tm: ThreatModel, session: Session, spread: float | None, result: LabelResult,
                     min_feature: float | None = None) -> LabelResult:
    """A trained-like model's one-step update after the count routes (FedAvg deltas: ``by_shown_on_delta``): the
    classes whose output-weight-gradient row has a negative entry are present for certain
    (fedaudit/labels/presence.py). Where at most FEW_SHOWN are shown, the batch is read as those classes only:
    the mean of the SHOWN_MEMBERS' counts, each projected onto them (a count method spreads a few-class batch over
    absent classes); where more are shown, every shown class gets at least one sample. Not after the
    routes that read BN buffers (not measured) or where the test cannot be read (the reason is reported in
    ``shown_classes``)."""
    d = result.diagnostics
    if tm.meta.local_steps != 1 or d.get("strategy") == "hybrid, BN statistics" or "bn_count_counts" in d:
        return result  # deltas and the BN routes: not measured

    def few(classes: torch.Tensor, info: dict) -> LabelResult | None:
        runs, skipped = run_each(tm, session, SHOWN_MEMBERS)
        if not runs:
            return None
        projected = [presence.project(r.counts_int, classes) for _, r, _, _ in runs]
        mean, counts = ensemble_counts(projected)
        return LabelResult(mean.float(), counts, {
            "chosen": "shown-classes ensemble", "strategy": "hybrid, few shown classes", **regime(spread),
            "negative_bias_entries": negative_entries(tm), "shown_classes": info,
            "members": [n for n, _, _, _ in runs],
            "candidates": [{"method": n, "counts": r.counts_int.tolist(), "projected": v.tolist(),
                            "seconds": round(t, 3)} for (n, r, _, t), v in zip(runs, projected)],
            "not_run": skipped}, result.warnings)

    return _with_shown(tm, session, spread, result, min_feature, few)


def _with_shown(tm: ThreatModel, session: Session, spread: float | None, result: LabelResult,
                min_feature: float | None, few: Few) -> LabelResult:
    """The shown-classes step around ``few(shown, info)``, the answer where at most FEW_SHOWN classes are shown
    (None: go on); where more are shown, every shown class gets at least one sample of the route's reading.
    The classes, each row's relative minimum and the route's answer (``before``) go to
    ``diagnostics.shown_classes``, or why the test cannot be read."""
    d = result.diagnostics
    why, classes, minima = read_shown(tm, session, min_feature)
    if classes is None or minima is None:
        d["shown_classes"] = {"not_applicable": "; ".join(why)}
        return result
    total, n = int(result.counts_int.sum()), int(classes.sum())
    info: dict = {"classes": torch.nonzero(classes).flatten().tolist(), "row_minima": [float(v) for v in minima],
                  "before": {"chosen": d.get("chosen"), "strategy": d.get("strategy"),
                             "counts": result.counts_int.tolist()}}
    if n > total:  # cannot be: the update is not what the test assumes
        d["shown_classes"] = {**info, "ignored": f"{n} classes shown for {total} samples"}
        return result
    if n <= FEW_SHOWN:
        answer = few(classes, info)
        if answer is not None:
            return answer
    floored = presence.floor(result.counts_int, classes)
    if not torch.equal(floored, result.counts_int):
        info["floored"] = True
        result.counts_int = floored
    result.diagnostics["shown_classes"] = info
    return result


def _bn_reading(result: LabelResult, notes: dict) -> torch.Tensor | None:
    """bn-count's reading of a FedAvg delta's BN mixture where a route ran it: rejected (``notes``), the one-class
    routes' (``bn_count_counts``), or the accepted one (chosen, or a member of the near-aux-mix mean); else None."""
    d = result.diagnostics
    counts = notes.get("bn_count_rejected", {}).get("counts") or d.get("bn_count_counts") \
        or candidate_counts(result, "bn-count")
    if counts is None and d.get("chosen") == "bn-count":
        return result.counts_int.clone()
    return None if counts is None else torch.tensor(counts, device="cpu")


def by_shown_on_delta(tm: ThreatModel, session: Session, result: LabelResult, notes: dict,
                      mean_steps: int = SHOWN_MEAN_STEPS) -> LabelResult:
    """A FedAvg delta, after its routes: the classes the output layer's weight update shows present for certain
    (presence.py: a delta of SGD, with or without momentum and without weight decay, is a positive combination of
    gradients, so the test holds). A K-step client rarely holds a sure sample of every step, and on the test
    models' trained-ConvNet and LeNet clients of 4-8 steps the test showed no absent class. Where at most
    FEW_SHOWN classes are shown, the counts are a reading that weighs every step's batch, projected onto them
    (the output layer shows mostly the last steps': a two-class client in class order reads as its second class
    there, and LLG, the few-class route, follows it); else the route's counts projected. Where more are shown
    and the route read a few-class batch (LLG), the many-classes route's method; every shown class gets at least
    one sample. The multi-step reading, by model:

    * BatchNorm with batch statistics: bn-count's reading of the BN mixture (accepted or rejected; the route's
      counts where bn-count did not run), up to ``mean_steps`` local steps (option shown-mean-steps) averaged with
      bias-count's counts on the shown classes (both readings go to ``shown_classes``)
      (held out on another trained ConvNet: two-class clients 67.9 -> 88.4%, the others unchanged;
      docs/results/labels.md, "Shown classes on FedAvg deltas"; at random init, "Shown classes on the BN ConvNet
      at random init");
    * other models: client-fit's counts (the route's own where it ran)
      (docs/results/labels.md, "Shown classes on the LeNets' deltas").

    Where the outputs do not depend on the input (spread below INPUT_INDEPENDENT) RLU's model is exact and its
    route is kept; the step runs there after the other routes only (the class-count route's: the PyTorch-init LeNet's
    two-class clients; docs/results/labels.md, "Shown classes on the LeNets' deltas")."""
    d = result.diagnostics
    spread = d.get("softmax_spread")
    bn = batch_statistics(tm)
    if spread is None or spread < INPUT_INDEPENDENT and d.get("chosen") == "rlu":
        return result
    fits = not bn and parameters(tm) <= delta.CLIENT_FIT_MAX_PARAMETERS

    def few(classes: torch.Tensor, info: dict) -> LabelResult | None:
        if not bool(classes.any()):
            return None
        reading, name = (_bn_reading(result, notes), "bn-count") if bn \
            else (_fit_reading(tm, session, result, fits), "client-fit")
        counts = presence.project(reading if reading is not None else result.counts_int, classes)
        source = ("BN reading" if bn else "client-fit") if reading is not None else "route's counts"
        if bn and reading is not None:
            info["bn_reading"] = counts.tolist()
            bias = _shown_mean_partner(tm, session, result) if tm.meta.local_steps <= mean_steps else None
            if bias is not None:
                partner = presence.project(bias, classes)
                info["bias_count"] = partner.tolist()
                counts = presence.project(ensemble_counts([counts, partner])[1], classes)
                source = "BN reading and bias-count"
        if torch.equal(counts, result.counts_int):
            return None
        return LabelResult(counts.float(), counts, {
            "chosen": name if reading is not None else d.get("chosen"),
            "strategy": f"hybrid, few shown classes on a delta ({source})", **regime(spread),
            "negative_bias_entries": negative_entries(tm), "shown_classes": info,
            "multi_step_aware": reading is not None or bool(d.get("multi_step_aware"))}, result.warnings)

    return _with_shown(tm, session, spread, result, None, few)


def _shown_mean_partner(tm: ThreatModel, session: Session, result: LabelResult) -> torch.Tensor | None:
    """bias-count's counts for the shown-classes mean: the route's candidate where it ran, else a run of it (None
    where it does not apply)."""
    ran = candidate_counts(result, "bias-count")
    if ran is not None:
        return torch.tensor(ran, device="cpu")
    runs, _ = run_each(tm, session, ("bias-count",))
    return runs[0][1].counts_int.clone() if runs else None


def _fit_reading(tm: ThreatModel, session: Session, result: LabelResult, fits: bool) -> torch.Tensor | None:
    """client-fit's counts of a FedAvg delta: the route's where it chose client-fit, else a run of it (None where
    it does not apply: no labelled aux images, or ``fits`` False: a model above CLIENT_FIT_MAX_PARAMETERS)."""
    if result.diagnostics.get("chosen") == "client-fit":
        return result.counts_int.clone()
    if not fits:
        return None
    runs, _ = run_each(tm, session, ("client-fit",))
    return runs[0][1].counts_int.clone() if runs else None


def by_one_shown_class(tm: ThreatModel, session: Session, result: LabelResult,
                       min_feature: float | None) -> LabelResult:
    """sample-split's result where the update shows exactly one class (presence.py) and the split put samples
    elsewhere: every sample to the shown class. On the label benchmark's trained LeNets and ConvNet (trials 0-5,
    216 batches) only single-class batches showed one class, while the split misses a sample of some of them
    (docs/results/labels.md, "One shown class after sample-split"); a hidden minority (1 of 8 trained-LeNet 7/1
    batches of 8) would cost its sample, as the split's misses do."""
    _, classes, _ = read_shown(tm, session, min_feature)
    if classes is None or int(classes.sum()) != 1 or bool((result.counts_int[~classes] == 0).all()):
        return result
    before = result.counts_int.tolist()
    result.counts_int = torch.where(classes, result.counts_int.sum(), 0).to(result.counts_int.dtype)
    result.counts = result.counts_int.to(result.counts.dtype)
    result.diagnostics["strategy"] += ", one shown class"
    result.diagnostics["shown_classes"] = {"classes": torch.nonzero(classes).flatten().tolist(),
                                           "before": {"counts": before}}
    return result
