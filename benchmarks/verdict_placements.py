"""How sharp can a placement on three proxies be and stay safe? A frontier read on stored rows, no reruns.

Issue 86 asks for --fail-on high false alarms <= 20% and whole-scale ranges <= 10% with under-reports <= 2%. The
default placement (fedaudit/verdict/calibrated.py, "one-sided") is safe (0 under-reports on 160 runs) but not sharp
(60% false alarms on the held-out grid). This script re-places the stored runs' proxies
(``proxy_records``: each proxy's truth-free score and measured band) by sharper rules and reads each one's safety and
sharpness (benchmarks/verdict_sharpness.py), beside an order-statistic bound:

* the real run's measured point lies above every proxy's measured point in some runs (the proxies are draws of the
  same attack on other images; with P exchangeable draws that happens up to 1 / (P + 1) of the time where outcomes
  vary). A placement whose upper end is built from the proxies' points alone under-reports every such run unless the
  run's truth-free score singles it out, and the score does not order runs closer than its residual (1.3 dB);
* a quiet run (measured low or medium) with a proxy whose point is high or above fires --fail-on high under any
  placement that covers the proxies' points: the false-alarm floor.

The variants below were written after the held-out grid's alarm sources were read (docs/results/verdict.md), so their
held-out figures are not out of sample for the choice among them; they chart the frontier, they do not pick a default.

    python -m benchmarks.verdict_placements
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.verdict_sharpness import sharpness
from benchmarks.verdict_transfer import remeasured, replaced
from fedaudit.metrics.risk import BANDS
from fedaudit.verdict.estimate import FIT

GRIDS = (("first grid (rerun, 77)", Path("benchmarks/results/verdict_transfer_floor2.jsonl")),
         ("held-out families (83)", Path("benchmarks/results/verdict_transfer_families.jsonl")))


def level(band: str) -> int:
    return BANDS.index(band)


def _up(band: str) -> str:
    return BANDS[min(level(band) + 1, len(BANDS) - 1)]


# name -> (how the upper end is built, what it reads)
VARIANTS = {
    "points": "upper end: the proxies' highest point; above every proxy's score, the rule's upper end",
    "points, +1 level above": "upper end: the proxies' highest point; above every proxy's score, one level more",
    "points, rule beyond 1.3 dB": "as '+1 level above', but the rule's upper end when the score is more than the "
                                  "rule's residual (1.3 dB) above every proxy's",
    "upper ends, rule beyond 1.3 dB": "upper end: the proxies' measured upper ends; the rule's upper end only beyond "
                                      "1.3 dB above every proxy's score",
}


def place(rule: dict[str, Any], recs: list[dict[str, Any]], how: str) -> dict[str, Any]:
    """The point as the default placement reads it, the upper end by ``how`` (a key of VARIANTS)."""
    s, scores, tol = rule["score_db"], [p["score_db"] for p in recs], FIT["residual_std_db"]
    points = sorted((p["measured"]["band"] for p in recs), key=level)
    above, below = s > max(scores), s < min(scores) - tol
    point = points[-1] if above else points[0] if below else points[len(points) // 2]
    upper = points[-1]
    if how == "points" and above:
        upper = max(upper, rule["range"][1], key=level)
    elif how == "points, +1 level above" and above:
        upper = _up(points[-1])
    elif how == "points, rule beyond 1.3 dB":
        upper = max(upper, rule["range"][1], key=level) if s > max(scores) + tol else _up(upper) if above else upper
    elif how == "upper ends, rule beyond 1.3 dB":
        upper = max((p["measured"]["range"][1] for p in recs), key=level)
        if s > max(scores) + tol:
            upper = max(upper, rule["range"][1], key=level)
    lower = min(points[0], point, key=level)
    return {"band": point, "range": [lower, max(upper, point, key=level)]}


def placed(rows: list[dict[str, Any]], how: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        recs = [p for p in r.get("proxy_records") or [] if p.get("measured") and p.get("score_db") is not None]
        est = place(r["rule"], recs, how) if recs and r["rule"].get("score_db") is not None \
            else r.get("placed_one-sided", r["estimate"])
        out.append({**r, "variant": est})
    return out


def bound(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Runs whose measured point is above every proxy's point; quiet runs with a proxy measured high or above."""
    out = {"runs": 0, "above_every_proxy": 0, "proxies_disagree": 0, "quiet": 0, "quiet_proxy_high": 0}
    for r in rows:
        pts = [level(p["measured"]["band"]) for p in r.get("proxy_records") or [] if p.get("score_db") is not None]
        if not pts:
            continue
        m = level(r["measured"]["band"])
        out["runs"] += 1
        out["above_every_proxy"] += m > max(pts)
        out["proxies_disagree"] += max(pts) > min(pts)
        if m <= level("medium"):
            out["quiet"] += 1
            out["quiet_proxy_high"] += max(pts) >= level("high")
    return out


def lines_for(name: str, rows: list[dict[str, Any]]) -> list[str]:
    b = bound(rows)
    out = [f"### {name}", "", f"{b['runs']} runs with proxies: the real run's measured point above every proxy's point "
           f"in {b['above_every_proxy']}; the proxies disagree in {b['proxies_disagree']}; {b['quiet_proxy_high']} of "
           f"{b['quiet']} quiet runs have a proxy measured high or above (the false-alarm floor).", "",
           "| placement | under-report | false alarm --fail-on high (upper) | --fail-on medium (upper) | whole scale "
           "| median width | kappa (SE) |", "|---|---|---|---|---|---|---|"]
    for how in ("one-sided (default)", *VARIANTS):
        rr, key = (rows, "placed_one-sided") if how.startswith("one-sided") else (placed(rows, how), "variant")
        s = sharpness(rr, key)
        out.append(f"| {how} | {s['under']}/{s['runs']} ({100 * s['under_rate']:.1f}%) | "
                   f"{100 * s['false_alarm_high_upper']:.0f}% (of {s['quiet_high']}) | "
                   f"{100 * s['false_alarm_medium_upper']:.0f}% | {100 * s['full_width'] / s['runs']:.0f}% | "
                   f"{s['median_width']} | {s['kappa']:.2f} ({s['kappa_se']:.2f}) |")
    return out + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args(argv)
    lines = [f"- {how}: {what}" for how, what in VARIANTS.items()] + [""]
    for name, path in GRIDS:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        lines += lines_for(name, replaced(remeasured([r for r in rows if "measured" in r])))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
