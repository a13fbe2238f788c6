"""Truth-free evidence of how determined recovered labels are.

* **Agreement**: the cheap count methods that apply to this update (bias-count, ZLG, iLRG, LLG, LLG+; aux data
  where the session has it, Gaussian dummies otherwise; or ``auto``'s own candidates when it scored them) are
  compared with the chosen counts by multiset overlap (InsAcc with the chosen counts in place of the truth).
  Methods with different assumptions that land on the same counts make the counts likely; a spread says the
  update underdetermines them.
* **Integrality**: 1 - 2 x the mean distance of the chosen method's raw per-class estimate from the nearest
  integer over the classes it counts (1: every raw count is an integer; 0: every one sits half way).
* **Determined**: agreement >= 0.9 and integrality >= 0.6 ("yes"), agreement < 0.6 ("no"), else "partly".
* **Even-split overlap**: how much an even guess that reads no update overlaps the chosen counts (the uniform floor,
  fedaudit/metrics/label_floor.py, with the chosen counts in place of the truth). Near 1 the counts add little to a
  guess that reads no update and are weak evidence that the batch is balanced (on trained models the count methods
  drift toward an even split whatever the batch); with the truth, the floor measures the same
  (docs/results/labels.md, "The uniform floor").
"""

from __future__ import annotations

from typing import Any

import torch

from fedaudit.errors import NotApplicable
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelResult
from fedaudit.metrics.label_floor import uniform_floor
from fedaudit.session import Aux, Session
from fedaudit.threat_model import ThreatModel

QUICK = ("bias-count", "zlg", "ilrg", "llg", "llg-plus")
DUMMIES = 200


def overlap(a: torch.Tensor, b: torch.Tensor) -> float:
    """Multiset overlap of two count vectors, over the larger total (1: identical)."""
    a, b = a.long().cpu(), b.long().cpu()
    return float(torch.minimum(a, b).sum()) / max(int(a.sum()), int(b.sum()), 1)


def integrality(raw: torch.Tensor, ints: torch.Tensor) -> float | None:
    raw = raw.double().cpu()
    keep = (raw.abs() > 0.05) | (ints.cpu() > 0)
    if not keep.any():
        return None
    gap = (raw[keep] - raw[keep].round()).abs().mean()
    return float(1 - 2 * gap)


def even_split_overlap(counts: torch.Tensor) -> float | None:
    """How much an even guess that reads no update overlaps ``counts`` (the uniform floor with them as the truth);
    None for an empty count vector."""
    return float(uniform_floor(counts)["InsAcc"]) if int(counts.sum()) > 0 else None


def _others(tm: ThreatModel, session: Session, method: str, result: LabelResult) -> dict[str, torch.Tensor]:
    cands = result.diagnostics.get("candidates")
    if cands:
        return {c["method"]: torch.tensor(c["counts"], device="cpu") for c in cands}
    out: dict[str, torch.Tensor] = {}
    # one set of dummies for every method without aux: their output-layer pass is then shared (labels/features.py)
    dummied = session.replace(aux=Aux.dummies(tm.spec, DUMMIES, session.seed)) if session.aux is None else session
    for name in QUICK:
        if name == method:
            continue
        cls = LABEL_METHODS.get(name)
        sub = dummied if cls.aux in ("optional", "labelled") else session
        if cls.why_not(tm, sub) or not cls.counts_capable:
            continue
        try:
            out[name] = cls().run(tm, sub).counts_int
        except (NotApplicable, ValueError, RuntimeError):
            continue
    return out


def label_evidence(tm: ThreatModel, session: Session, method: str, result: LabelResult) -> dict[str, Any]:
    others = _others(tm, session, method, result)
    chosen = result.counts_int
    agree = {name: overlap(chosen, c) for name, c in others.items()}
    agreement = sum(agree.values()) / len(agree) if agree else None
    integ = integrality(result.counts, chosen)
    if agreement is None:
        determined = "unknown"
    elif agreement >= 0.9 and (integ is None or integ >= 0.6):
        determined = "yes"
    elif agreement < 0.6:
        determined = "no"
    else:
        determined = "partly"
    return {"agreement": agreement, "agreement_by_method": agree, "integrality": integ, "determined": determined,
            "methods_compared": len(agree), "even_split_overlap": even_split_overlap(chosen)}
