"""Updates routed by how many output-bias-gradient entries are negative (the classes whose share of the batch exceeds
their mean predicted probability): few classes to LLG, many on a trained-like model to bias-count, a single class to
that class where two readings agree (docs/results/labels.md, "Many classes")."""

from __future__ import annotations

import torch

from fedaudit.labels.auto_routes.bn_mixture import bn_one_class, by_agreement, doubts_one_class
from fedaudit.labels.auto_routes.calibration import FEW_CLASSES, INVISIBLE_SHARE, MANY_CLASSES, ONE_CLASS_SHARE, SPREAD_THRESHOLD
from fedaudit.labels.auto_routes.common import Run, all_in_class, routed, run_each
from fedaudit.labels.base import LabelResult
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def by_class_count(tm: ThreatModel, session: Session, spread: float | None,
                   rejected: Run | None = None) -> LabelResult | None:
    """Several local steps or trained-like outputs, routed by the number of negative output-bias-gradient entries
    (on a trained DLG LeNet every negative entry is a present class and 79% of present classes are negative):
    * at most FEW_CLASSES: LLG (it led RLU, which the evidence follows, on such batches); on trained-like outputs
      with one negative entry, LLG putting at least ONE_CLASS_SHARE of the batch on that class and HFGI all of
      it, the whole batch goes to it (``_one_class``);
    * at least MANY_CLASSES on trained-like outputs: bias-count (a batch spread like the aux set, where RLU's
      least squares is ill-conditioned because the model is sure: S near I); on a FedAvg delta whose BN reading
      was rejected (``rejected``), the mean with that reading and LLG's where those two agree
      (bn_mixture.by_agreement);
    * exactly FEW_CLASSES + 1 on trained-like outputs, one local step: bias-count or LLG by the share of the batch
      bias-count puts on the positive entries' classes (``_by_invisible_share``);
    * but first, on trained-like outputs: bn-count wherever it applies (a one-step upload with BN buffers and
      labelled aux images, at least MIN_AUX_PER_CLASS in each class the aux set has), which reads the counts from
      the BN statistics that sure samples move as much as any other (docs/results/labels.md, "BN statistics"),
      unless the bias gradient shows one class and bn-count puts at least ONE_CLASS_SHARE of the batch on one
      class: a single-class batch, where bn-count spreads a sample or two over other classes. If bn-count's
      class is the negative entry's, the whole batch is that class ("one class"); otherwise LLG.
    Anything else: None (docs/results/labels.md, "Many classes")."""
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
    if 0 < negative <= FEW_CLASSES:
        method, strategy = "llg", "hybrid, few classes"
    elif negative >= MANY_CLASSES and trained:
        method, strategy = "bias-count", "hybrid, many classes"
    elif negative == FEW_CLASSES + 1 and trained and tm.meta.local_steps == 1:
        return _by_invisible_share(tm, session, spread, gb, negative, extra)
    else:
        return None
    runs, _ = run_each(tm, session, (method,))
    if not runs:
        return None
    if method == "bias-count" and rejected is not None:
        agreed, gap = by_agreement(tm, session, spread, negative, rejected, runs[0])
        if agreed is not None:
            return agreed
        extra["readings_distance"] = gap
    if trained and negative == 1 and "bn_count_counts" not in extra:
        single = _one_class(tm, session, runs[0], gb)
        if single is not None and doubts_one_class(rejected, int(torch.argmax(single[0][1].counts_int))):
            assert rejected is not None  # doubts_one_class holds only with a rejected reading
            return routed(rejected, "hybrid, BN statistics (one class doubted)", spread, negative,
                          {"one_class_counts": single[0][1].counts_int.tolist()})
        if single is not None:
            return routed(single[0], "hybrid, one class", spread, negative, {**extra, **single[1]})
    return routed(runs[0], strategy, spread, negative, extra)


def _by_invisible_share(tm: ThreatModel, session: Session, spread: float | None, gb: torch.Tensor,
                        negative: int, extra: dict) -> LabelResult | None:
    """A trained-like model's one-step update with FEW_CLASSES + 1 negative output-bias entries: bias-count where it
    puts more than INVISIBLE_SHARE of the batch on the classes with a positive entry (a batch of many classes
    whose sure samples hide their error mass), else LLG (a batch of about three classes)."""
    runs, _ = run_each(tm, session, ("bias-count",))
    if not runs:
        return None
    counts = runs[0][1].counts_int
    share = float(counts[gb > 0].sum()) / max(float(counts.sum()), 1.0)
    extra = {**extra, "bias_count_share_on_positive": share}
    if share > INVISIBLE_SHARE:
        return routed(runs[0], "hybrid, mostly invisible", spread, negative, extra)
    llg, _ = run_each(tm, session, ("llg",))
    if not llg:
        return None
    return routed(llg[0], "hybrid, three classes", spread, negative, extra)


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
