"""FedAvg deltas whose BN buffers hold the mixture of the K local batches' statistics: bn-count's reading of that
mixture, where it is kept, and the checks that set a rejected reading beside the output layer's."""

from __future__ import annotations

import torch

from fedaudit.labels.auto_routes.calibration import AGREE_TV, NEAR_AUX_TV, ONE_CLASS_SHARE
from fedaudit.labels.auto_routes.common import Run, all_in_class, distance, ensemble_of, negative_entries, routed, run_each
from fedaudit.labels.base import LabelResult
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def bn_one_class(tm: ThreatModel, run: Run) -> Run | None:
    """bn-count's run where the output bias gradient has exactly one negative entry and bn-count puts at least
    ONE_CLASS_SHARE of the batch on that entry's class: both channels name the same single class, and the whole batch
    goes to it (bn-count spreads a sample or two of a single-class batch over other classes); else None."""
    gb = tm.final_bias_grad
    counts = run[1].counts_int
    top = int(torch.argmax(counts))
    if gb is None or int((gb < 0).sum()) != 1 or float(gb[top]) >= 0 \
            or float(counts[top]) < ONE_CLASS_SHARE * float(counts.sum()):
        return None
    return all_in_class(counts, top, run[2], run[3])


def by_bn_mixture(tm: ThreatModel, session: Session, spread: float | None, notes: dict,
                  aux_batches: str) -> tuple[LabelResult | None, Run | None]:
    """A FedAvg delta (K > 1) whose BN buffers hold the mixture of the K batches' statistics, with labelled aux
    images (at least MIN_AUX_PER_CLASS per class): bn-count (``--aux-batches aux_batches``) reads the mixture as one
    batch of B K samples. Kept where its counts explain the mixture to a relative residual below
    MIXTURE_MAX_RESIDUAL and the model moved less than MIXTURE_MAX_CHANGE of its norm (then the aux moments at one
    model along the update stand for every step's; the residual alone passed momentum-0.9 clients it got badly
    wrong). On 36 held-out trained BN ConvNet clients it fired on 29 and gained 11.5 +- 2.6 points over the route
    below there (docs/results/labels.md, "bn-count on FedAvg deltas"); where it names the bias gradient's one
    negative class (``bn_one_class``), the whole client is that class. Otherwise its counts, residual and change are
    noted and the route goes on (the many-classes route's ``by_agreement`` may still take them). Returns (the routed
    result or None, bn-count's rejected run as ``run_each`` gives it, or None)."""
    from fedaudit.labels.bn_count import too_few_aux  # here: keeps the registry's order

    if session.aux is None or session.aux.labels is None:
        return None, None
    few = too_few_aux(session)
    if few:
        notes["bn_count_skipped"] = few
        return None, None
    runs, skipped = run_each(tm, session, ("bn-count",), {"bn-count": {"aux-batches": aux_batches}})
    if not runs:
        notes["bn_count_skipped"] = skipped.get("bn-count", "not applicable")
        return None, None
    d = runs[0][1].diagnostics
    fit = {"bn_count_fit": {k: d[k] for k in ("relative_residual", "relative_change", "aux_batches")}}
    # the one-class call reads the aux images under the mixture's statistics (as ONE_CLASS_SHARE was chosen):
    # the matched reading, better elsewhere, spread 2 of 6 held-out one-class clients to 75-80% on their class
    # (docs/results/labels.md, "bn-count's aux images in simulated batches"); then the matched one's call
    for run in _mixture_reading(tm, session, runs[0]) + ([runs[0]] if not d["mixture_doubts"] else []):
        single = bn_one_class(tm, run)
        if single is not None:
            how = run[1].diagnostics.get("aux_batches")
            return routed(single, "hybrid, one class (BN mixture)", spread, 1,
                          {"bn_count_counts": run[1].counts_int.tolist(), "multi_step_aware": True,
                           "bn_count_fit": {**fit["bn_count_fit"], "one_class_reading": how}}), None
    if not d["mixture_doubts"]:
        near = _by_near_aux_mix(tm, session, spread, runs[0])
        if near is not None:
            near.diagnostics.update(fit)
            return near, None
        return routed(runs[0], "hybrid, BN statistics (mixture of the local batches)", spread,
                      negative_entries(tm), fit), None
    notes["bn_count_rejected"] = {"counts": runs[0][1].counts_int.tolist(),
                                  "relative_residual": float(d["relative_residual"]),
                                  "relative_change": d["relative_change"], "aux_batches": d["aux_batches"],
                                  "why": "; ".join(d["mixture_doubts"])}
    return None, runs[0]


def _mixture_reading(tm: ThreatModel, session: Session, run: Run) -> list[Run]:
    """bn-count's reading with the aux images under the BN mixture's statistics (``--aux-batches mixture``) where
    ``run`` read them otherwise, the one-class call can fire (one negative output-bias entry) and it passes its
    checks: [that run], else []."""
    if run[1].diagnostics.get("aux_batches") in (None, "mixture") or negative_entries(tm) != 1:
        return []
    runs, _ = run_each(tm, session, ("bn-count",), {"bn-count": {"aux-batches": "mixture"}})
    return [r for r in runs if not r[1].diagnostics["mixture_doubts"]]


def _by_near_aux_mix(tm: ThreatModel, session: Session, spread: float | None, run: Run) -> LabelResult | None:
    """bn-count's accepted reading of a BN mixture that lies within NEAR_AUX_TV (total variation) of the aux set's
    class mix: the mean of its counts and bias-count's, whose one assumption (a batch composed like the aux set)
    then holds and whose counts are less noisy than a reading of B K samples' moments. None elsewhere."""
    assert session.aux is not None and session.aux.labels is not None
    counts = run[1].counts_int
    gap = distance(counts, torch.bincount(session.aux.labels.long().flatten(),
                                          minlength=counts.numel())[:counts.numel()])
    if gap >= NEAR_AUX_TV:
        return None
    bias_count, _ = run_each(tm, session, ("bias-count",))
    result = ensemble_of([run] + bias_count, {}, spread)
    if result is None:
        return None
    result.diagnostics.update(strategy="hybrid, BN statistics and bias-count (near the aux mix)",
                              distance_to_aux_mix=gap, negative_bias_entries=negative_entries(tm))
    return result


def by_agreement(tm: ThreatModel, session: Session, spread: float | None, negative: int, rejected: Run,
                 route: Run) -> tuple[LabelResult | None, float | None]:
    """The many-classes route's bias-count run (``route``) on a FedAvg delta whose BN-mixture reading by bn-count
    was rejected (``rejected``): where that reading and LLG's lie within AGREE_TV (total variation) of each other,
    the mean of the three count vectors (a skewed client, which bias-count reads as spread like the aux set).
    Returns (that result or None, the readings' distance; None where LLG does not apply)."""
    llg, _ = run_each(tm, session, ("llg",))
    if not llg:
        return None, None
    gap = distance(rejected[1].counts_int, llg[0][1].counts_int)
    if gap >= AGREE_TV:
        return None, gap
    result = ensemble_of([rejected, llg[0], route], {}, spread)
    assert result is not None  # three runs: the ensemble always forms
    result.diagnostics.update(strategy="hybrid, many classes (BN reading and LLG agree)",
                              readings_distance=gap, negative_bias_entries=negative)
    return result, gap

