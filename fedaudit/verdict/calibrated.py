"""The estimated band calibrated on the audit's own case: the real run placed among proxy batches.

A frozen rule fitted on a benchmark grid does not transfer to models, images and budgets it never saw (out of its
grid it under-reported 29% of runs, docs/results/verdict.md). So the verdict measures the case at hand: P proxy
batches of public images shaped like the model's input are captured through the same checkpoint with the update's
recipe and defenses, attacked with the same attack, budget and restarts, and measured against their known truth
(fedaudit/jobs/proxies.py). What they measured is what this attack achieves on this model, recipe and batch size.

Placement. Each run, the real one and each proxy, also has the rule's truth-free score (fedaudit/verdict/estimate.py:
gradient distance against blank and random images, restart agreement, structure, in dB of predicted PSNR):

* **point**: the proxies' median measured point (the upper median for an even count) while the real run lies among
  them; the highest proxy's point when it scores above them all, the lowest's when below;
* **range**: from the lowest lower end to the highest upper end the proxies measured; where the real run scores
  above every proxy (its evidence explains its update better than any proxy's), the upper end also takes in the
  rule's own upper end at that score, since no proxy vouches for it; below them all by more than the rule's residual
  standard deviation (``residual_std_db``, 1.3 dB: closer scores do not order runs), the lower end takes in the
  rule's lower end. Each widens only the end it lies beyond;
* **confidence**: the share of proxies whose measured point equals the estimate's, ``p_higher`` the share above
  it, both Laplace-smoothed ((k + 1) / (P + 2)): with three proxies that agree, 0.8.

The tolerance is one-sided (``placement="one-sided"``, the default) because a false "safe" is the costly error. Read on
the same proxies (benchmarks/verdict_transfer.py, docs/results/verdict.md): before issue 86 (``"envelope"``) any score
outside the proxies' span took in the rule's whole range at both ends; a tolerance on both sides (``"tolerant"``)
halved the whole-scale ranges on the first grid's runs but under-reported 2 of 32 held-out runs (Flower's CNN at B = 2,
a ResNet-10 under global pruning), each scoring a few tenths of a dB above its proxies.

Gating on the upper end (the default, ``--gate upper``) fails a run when any proxy, or the rule out of the proxies'
span, shows the level: a false alarm is the cheap error.
"""

from __future__ import annotations

from typing import Any

from fedaudit.metrics.risk import BANDS
from fedaudit.verdict.estimate import FIT


def _level(band: str) -> int:
    return BANDS.index(band)


PLACEMENTS = ("one-sided", "tolerant", "envelope")  # the default first; "envelope": before issue 86 (docstring)


def calibrated(rule: dict[str, Any], proxies: list[dict[str, Any]], tolerance_db: float | None = None,
               placement: str = "one-sided") -> dict[str, Any]:
    """The calibrated estimate from the real run's rule estimate ``rule`` and the proxies' records (each with
    ``measured``: {"band", "range"} and ``score_db``); ``rule`` when no proxy was measured. The rule's caveats
    (a label reading near a guess) carry over: the proxies were given their labels, so they cannot see that.
    ``tolerance_db``: how far apart scores must be to order runs (default: the rule's residual standard deviation)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    measured = [p for p in proxies if p.get("measured") and p.get("score_db") is not None]
    if not measured or rule.get("score_db") is None:
        return rule
    tol = 0.0 if placement == "envelope" else (FIT["residual_std_db"] if tolerance_db is None else tolerance_db)
    s = float(rule["score_db"])
    scores = [p["score_db"] for p in measured]
    points = sorted((p["measured"]["band"] for p in measured), key=_level)
    # one-sided: the tolerance only where it cannot lower the upper end (a score a little below the proxies' is
    # among them; any score above every proxy's keeps the rule's upper end: a false "safe" is the costly error)
    above = s > max(scores) + (0.0 if placement == "one-sided" else tol)
    below = s < min(scores) - tol
    if above:  # the real run explains its update better than every proxy did
        point, where = points[-1], "above every proxy's score: the rule's upper end is included"
    elif below:
        point, where = points[0], "below every proxy's score: the rule's lower end is included"
    else:
        point, where = points[len(points) // 2], (f"among the proxies' scores ({min(scores):.1f}-{max(scores):.1f} dB, "
                                                  f"within {tol:.1f} dB)")
    lower = min((p["measured"]["range"][0] for p in measured), key=_level)
    upper = max((p["measured"]["range"][1] for p in measured), key=_level)
    if placement == "envelope" and (above or below):
        lower = min(lower, rule["range"][0], key=_level)
        upper = max(upper, rule["range"][1], key=_level)
    elif above:
        upper = max(upper, rule["range"][1], key=_level)
    elif below:
        lower = min(lower, rule["range"][0], key=_level)
    lower = min(lower, point, key=_level)
    upper = max(upper, point, key=_level)
    n = len(measured)
    same = sum(p["measured"]["band"] == point for p in measured)
    higher = sum(_level(p["measured"]["band"]) > _level(point) for p in measured)
    return {"band": point, "range": [lower, upper], "confidence": round((same + 1) / (n + 2), 3),
            "p_higher": round((higher + 1) / (n + 2), 3), "score_db": rule["score_db"],
            "source": f"calibrated on {n} proxy batch{'es' if n != 1 else ''}",
            "why": (f"the same attack on {n} public batch{'es' if n != 1 else ''} captured with this update's recipe "
                    f"measured {', '.join(_band_text(p['measured']) for p in measured)}; this run's evidence "
                    f"(rule score {s:.1f} dB) is {where}"),
            "rule": {key: rule.get(key) for key in ("band", "range", "confidence", "p_higher", "score_db")},
            "outside_proxies": above or below, **({"caveats": rule["caveats"]} if rule.get("caveats") else {})}


def _band_text(measured: dict[str, Any]) -> str:
    lo, hi = measured["range"]
    return f"{measured['band'].replace('_', ' ')} [{lo.replace('_', ' ')}, {hi.replace('_', ' ')}]"
