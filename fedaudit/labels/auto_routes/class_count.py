"""Updates routed by how many output-bias-gradient entries are negative (the classes whose share of the batch exceeds
their mean predicted probability): few classes to the plain ensemble of the count methods, more on a trained-like model
to bias-count, a single class where two readings agree, or bn-count's reading of one-step BN buffers
(docs/results/labels.md, "Which routes earn their place")."""

from __future__ import annotations

import torch

from fedaudit.labels.auto_routes.bn_mixture import bn_one_class, by_agreement
from fedaudit.labels.auto_routes.calibration import FEW_CLASSES, ONE_CLASS_SHARE, SPREAD_THRESHOLD
from fedaudit.labels.auto_routes.common import Run, all_in_class, routed, run_each
from fedaudit.labels.auto_routes.delta import by_ensemble
from fedaudit.labels.base import LabelResult
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def by_class_count(tm: ThreatModel, session: Session, spread: float | None,
                   rejected: Run | None = None) -> LabelResult | None:
    """Several local steps or trained-like outputs, routed by the number of negative output-bias-gradient entries
    (on a trained DLG LeNet every negative entry is a present class and 79% of present classes are negative):
    * on trained-like outputs, first: bn-count wherever it applies (a one-step upload with BN buffers and labelled
      aux images, at least MIN_AUX_PER_CLASS in each class the aux set has), which reads the counts from the BN
      statistics that sure samples move as much as any other (docs/results/labels.md, "BN statistics"), unless the
      bias gradient shows one class and bn-count puts at least ONE_CLASS_SHARE of the batch on one class: a
      single-class batch, where bn-count spreads a sample or two over other classes (``bn_one_class``);
    * at most FEW_CLASSES negative entries: the plain ensemble (delta.by_ensemble); more on trained-like outputs
      (not FEW_CLASSES + 1 on a FedAvg delta: later routes read those): bias-count (a batch spread like the aux set,
      where RLU's least squares is ill-conditioned because the model is sure: S near I); on a FedAvg delta whose BN
      reading was rejected (``rejected``), the mean with that reading and LLG's where those two agree
      (bn_mixture.by_agreement). The rules this replaced (LLG on few classes; a share rule on three entries; a
      separate threshold for "many") did not beat the ensemble on 348 held-out clients;
    * but on trained-like outputs with one negative entry, LLG putting at least ONE_CLASS_SHARE of the batch on that
      class and HFGI all of it: the whole batch goes to it (``_one_class``). (Until 2026-12-01 bn-count's rejected
      reading of a FedAvg delta's BN mixture could doubt that call: on held-out clients the shown-classes step
      overrode it without weight decay, and with weight decay it read -0.2 +- 0.8 points; docs/results/labels.md,
      "Two-class FedAvg clients".)
    Anything else: None."""
    gb = tm.final_bias_grad
    if gb is None:
        return None
    negative = int((gb < 0).sum())
    trained = spread is not None and spread >= SPREAD_THRESHOLD
    extra: dict = {}
    from fedaudit.labels.bn_count import too_few_aux  # here: keeps the registry's order

    few_aux = too_few_aux(session)
    if trained and negative > 0 and few_aux and not LABEL_METHODS.get("bn-count").why_not(tm, session):
        extra["bn_count_skipped"] = few_aux
    elif trained and negative > 0 and tm.meta.local_steps == 1:  # K > 1: bn_mixture.by_bn_mixture
        runs, _ = run_each(tm, session, ("bn-count",))  # empty where bn-count does not apply
        if runs:
            counts = runs[0][1].counts_int
            if negative > 1 or float(counts.max()) < ONE_CLASS_SHARE * float(counts.sum()):
                return routed(runs[0], "hybrid, BN statistics", spread, negative, {})
            extra = {"bn_count_counts": counts.tolist()}
            single = bn_one_class(tm, runs[0])
            if single is not None:
                return routed(single, "hybrid, one class", spread, negative, extra)
    if negative == 0 or (negative > FEW_CLASSES and not trained) \
            or (negative == FEW_CLASSES + 1 and tm.meta.local_steps > 1):
        return None
    # few classes: the plain ensemble (LLG, the earlier rule, did not beat it on 348 held-out clients); more on a
    # trained-like model: bias-count, whose aux-mix composition keeps such batches at or above the even-guess floor
    # where the ensemble fell below it on 6 held-out clients (docs/results/labels.md, "Which routes earn their place");
    # the mean of agreeing readings stays: without it its clients lost 6-25 points each
    if negative > FEW_CLASSES:
        runs, _ = run_each(tm, session, ("bias-count",))
        if not runs:
            return None
        if rejected is not None:  # a FedAvg delta whose BN reading was rejected: the mean where it and LLG agree
            agreed, gap = by_agreement(tm, session, spread, negative, rejected, runs[0])
            if agreed is not None:
                return agreed
            extra["readings_distance"] = gap
        return routed(runs[0], "hybrid, many classes", spread, negative, extra)
    result = by_ensemble(tm, session, spread)
    if result is None:
        return None
    if trained and negative == 1 and "bn_count_counts" not in extra:
        llg, _ = run_each(tm, session, ("llg",))
        single = _one_class(tm, session, llg[0], gb) if llg else None
        if single is not None:
            return routed(single[0], "hybrid, one class", spread, negative, {**extra, **single[1]})
    result.diagnostics.update(strategy="hybrid, few classes (ensemble)", negative_bias_entries=negative, **extra)
    return result


def _one_class(tm: ThreatModel, session: Session, llg: Run, gb: torch.Tensor) -> tuple[Run, dict] | None:
    """A trained-like model's update whose bias gradient has one negative entry, on whose class LLG puts at least
    ONE_CLASS_SHARE of the batch and HFGI the whole batch: the readings name one class, and the whole batch goes
    to it. LLG's estimate leaves a sample or two on other classes of a single-class batch (94-98% on the
    benchmark's single-class cells of B >= 16, HFGI 100); where a second class hides behind the one negative
    entry, HFGI finds it more often than LLG (docs/results/labels.md, "One class without BN buffers"). The route
    and LLG's and HFGI's counts, or None where they do not agree on one class."""
    _, result, sub, seconds = llg
    counts = result.counts_int
    top = int(torch.argmin(gb))
    if int(torch.argmax(counts)) != top or float(counts[top]) < ONE_CLASS_SHARE * float(counts.sum()):
        return None
    runs, _ = run_each(tm, session, ("hfgi",))
    if not runs or int(runs[0][1].counts_int[top]) != int(counts.sum()):
        return None
    extra = {"llg_counts": counts.tolist(), "hfgi_counts": runs[0][1].counts_int.tolist()}
    return all_in_class(counts, top, sub, seconds + runs[0][3]), extra
