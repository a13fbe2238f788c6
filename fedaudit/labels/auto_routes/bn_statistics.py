"""One-step uploads that carry the clients' BN buffers, with labelled aux images: bn-count reads the batch's class
counts from the BN statistics, which sure samples move as much as any other (the output layer hardly shows them).

Out of sample (benchmarks/labels_routes.py: trained ConvNet and ResNet-10 clients on scikit-learn's UCI digits and
new MNIST trials, B = 32): bn-count's reading beat the plain ensemble by 24 +- 7 points where this route answered
(docs/results/labels.md, "Which routes earn their place"). Where the output bias gradient has one negative entry and
bn-count puts at least ONE_CLASS_SHARE of the batch on that entry's class, both channels name one class and the
whole batch goes to it (bn-count spreads a sample or two of a single-class batch: the four held-out one-class
clients read 100% with it).
"""

from __future__ import annotations

from fedaudit.labels.auto_routes.bn_mixture import bn_one_class
from fedaudit.labels.auto_routes.common import negative_entries, routed, run_each
from fedaudit.labels.base import LabelResult
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def by_bn_statistics(tm: ThreatModel, session: Session, spread: float | None, notes: dict) -> LabelResult | None:
    """bn-count's counts (all to one class where ``bn_one_class`` says so), where it applies (BN buffers in the
    upload, labelled aux images, at least MIN_AUX_PER_CLASS in each aux class); None elsewhere (the reason noted where
    the aux set is too small)."""
    from fedaudit.labels.bn_count import too_few_aux  # here: keeps the registry's order
    from fedaudit.labels.registry import LABEL_METHODS

    if tm.final_bias_grad is None or negative_entries(tm) == 0 or LABEL_METHODS.get("bn-count").why_not(tm, session):
        return None
    few = too_few_aux(session)
    if few:
        notes["bn_count_skipped"] = few
        return None
    runs, _ = run_each(tm, session, ("bn-count",))
    if not runs:
        return None
    single = bn_one_class(tm, runs[0])
    if single is not None:
        return routed(single, "hybrid, one class", spread, 1, {"bn_count_counts": runs[0][1].counts_int.tolist()})
    return routed(runs[0], "hybrid, BN statistics", spread, negative_entries(tm), {})
