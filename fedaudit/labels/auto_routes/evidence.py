"""The evidence route (``--strategy evidence``, and hybrid's on one-step updates no other route takes): every
candidate's counts scored by how well they explain the output layer's update (fedaudit/labels/evidence.py)."""

from __future__ import annotations

from fedaudit.errors import NotApplicable
from fedaudit.labels.auto_routes.common import DUMMIES, candidates, regime, run_each
from fedaudit.labels.base import LabelResult
from fedaudit.labels.evidence import Evidence
from fedaudit.session import Aux, Session
from fedaudit.threat_model import ThreatModel

# evidence candidates, in tie-break order (the exact-at-random-init methods first)
CANDIDATES = ("bias-count", "zlg", "ilrg", "rlu", "llg-plus", "llg", "hfgi", "fedleak")


def by_evidence(tm: ThreatModel, session: Session, spread: float | None) -> LabelResult | None:
    """The candidate whose counts score best (lowest; ties to the earlier of CANDIDATES), every candidate's score
    and counts reported; None where the evidence cannot be formed or no candidate runs."""
    aux = session.aux if session.aux is not None and session.aux.labels is not None \
        else Aux.dummies(tm.spec, DUMMIES, session.seed)
    try:
        evidence = Evidence(tm, aux)
    except (NotApplicable, ValueError):
        return None
    done, skipped = run_each(tm, session, CANDIDATES)
    runs = [(name, result, evidence.score(result.counts_int), seconds) for name, result, _, seconds in done]
    if not runs:
        return None
    best = min(range(len(runs)), key=lambda i: (round(runs[i][2], 9), i))
    name, result, score, _ = runs[best]
    rules_choice = next((n for n, m, s in candidates(tm, session, spread) if not m.why_not(tm, s)), None)
    result.diagnostics = {
        "chosen": name, "strategy": "evidence", "score": score, "evidence_aux": aux.kind,
        "rules_choice": rules_choice, **regime(spread),
        "candidates": [{"method": n, "score": s, "counts": r.counts_int.tolist(), "seconds": round(t, 3)}
                       for n, r, s, t in runs],
        "not_run": skipped, **result.diagnostics}
    return result
