"""One-step uploads that carry the clients' BN buffers, with labelled aux images: bn-count reads the batch's class
counts from the BN statistics, which sure samples move as much as any other (the output layer hardly shows them).

Out of sample (benchmarks/labels_routes.py: trained ConvNet and ResNet-10 clients on scikit-learn's UCI digits and
new MNIST trials, B = 32): bn-count's reading beat the plain ensemble by 24 +- 7 points where this route answered
(docs/results/labels.md, "Which routes earn their place"). The one-class shortcut the route had (all to the class
where bn-count puts ONE_CLASS_SHARE on the one negative bias entry's) was dropped with the class-count routes it
lived among: no held-out client gained from it, and it cost the minority of 90/10 batches.
"""

from __future__ import annotations

from fedaudit.labels.auto_routes.common import negative_entries, routed, run_each
from fedaudit.labels.base import LabelResult
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def by_bn_statistics(tm: ThreatModel, session: Session, spread: float | None, notes: dict) -> LabelResult | None:
    """bn-count's counts, where it applies (BN buffers in the upload, labelled aux images, at least
    MIN_AUX_PER_CLASS in each aux class); None elsewhere (the reason noted where the aux set is too small)."""
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
    return routed(runs[0], "hybrid, BN statistics", spread, negative_entries(tm), {})
