"""Sharpness beside safety: how an estimated band reads against the measured one, and against trivial baselines.

A verdict that is safe but fires on most audits gets switched off. So every estimator is read on the same runs for

* **safety**: under-reports (the estimate's upper end below the measured point);
* **false alarms**: of ``--fail-on high`` among runs measured low or medium, of ``--fail-on medium`` among runs
  measured low, at each gate end (``upper``, the default; ``point``; ``lower``);
* **width**: the share of ranges over the whole scale (low .. very high) and of two levels, the median;
* **skill of the point**: recall per measured band and Cohen's kappa with its large-sample standard error.

Baselines read the same runs: ``always low [low .. very high]`` (what a tool that knows nothing and never
under-reports says) and the frozen rule (``--proxies 0``). An estimator shows skill only where its kappa is above
both by more than its standard error.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from fedaudit.metrics.risk import BANDS, GATES, gated

CONSTANT = {"band": "low", "range": ["low", "very_high"]}


def level(band: str) -> int:
    return BANDS.index(band)


def kappa(pairs: list[tuple[str, str]]) -> tuple[float, float]:
    """Cohen's kappa of (measured, estimated) points and its large-sample standard error
    sqrt(p_o (1 - p_o) / (n (1 - p_e)^2)); (nan, nan) without runs, (0, 0) when chance agreement is total."""
    n = len(pairs)
    if n == 0:
        return math.nan, math.nan
    po = sum(a == b for a, b in pairs) / n
    pe = sum((sum(a == c for a, _ in pairs) / n) * (sum(b == c for _, b in pairs) / n) for c in BANDS)
    if pe >= 1.0:
        return 0.0, 0.0
    return (po - pe) / (1 - pe), math.sqrt(po * (1 - po) / (n * (1 - pe) ** 2))


def sharpness(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The figures above for estimator ``key`` of ``rows`` (each with ``measured`` and ``key``: {"band", "range"});
    ``key = "constant"`` reads the always-low-to-very-high baseline."""
    usable = [(r["measured"], CONSTANT if key == "constant" else r[key]) for r in rows
              if key == "constant" or ((r.get(key) or {}).get("band") and r[key].get("range"))]
    n = len(usable)
    if not n:
        return {"runs": 0}
    widths = [level(e["range"][1]) - level(e["range"][0]) for _, e in usable]
    out: dict[str, Any] = {
        "runs": n, "under": sum(level(e["range"][1]) < level(m["band"]) for m, e in usable),
        "exact": sum(e["band"] == m["band"] for m, e in usable),
        "full_width": sum(w == 3 for w in widths), "two_levels": sum(w == 2 for w in widths),
        "median_width": statistics.median(widths)}
    out["under_rate"] = out["under"] / n
    for gate in GATES:
        for fail_on, below in (("high", ("low", "medium")), ("medium", ("low",))):
            quiet = [(m, e) for m, e in usable if m["band"] in below]
            fired = sum(level(gated(e["band"], e["range"], gate)) >= level(fail_on) for _, e in quiet)
            out[f"false_alarm_{fail_on}_{gate}"] = fired / len(quiet) if quiet else math.nan
            out[f"quiet_{fail_on}"] = len(quiet)
    out["recall"] = {b: (sum(e["band"] == b for m, e in usable if m["band"] == b),
                         sum(m["band"] == b for m, _ in usable)) for b in BANDS}
    out["kappa"], out["kappa_se"] = kappa([(m["band"], e["band"]) for m, e in usable])
    return out


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.0f}%"


def table(rows: list[dict[str, Any]], estimators: list[tuple[str, str]]) -> list[str]:
    """Markdown lines: one row per (key, name) estimator, then each one's per-band recall."""
    lines = ["| estimate | runs | under-report | false alarm --fail-on high (upper / point / lower) | "
             "false alarm --fail-on medium (upper / point / lower) | whole scale | two levels | median width | "
             "kappa of the point (SE) |", "|---|---|---|---|---|---|---|---|---|"]
    read = {}
    for key, name in estimators:
        s = read[key] = sharpness(rows, key)
        if not s["runs"]:
            continue
        fa = {f: " / ".join(_pct(s[f"false_alarm_{f}_{g}"]) for g in GATES) for f in ("high", "medium")}
        lines.append(f"| {name} | {s['runs']} | {_pct(s['under_rate'])} ({s['under']}) | {fa['high']} "
                     f"(of {s['quiet_high']}) | {fa['medium']} (of {s['quiet_medium']}) | {_pct(s['full_width'] / s['runs'])} | "
                     f"{_pct(s['two_levels'] / s['runs'])} | {s['median_width']} | {s['kappa']:.2f} ({s['kappa_se']:.2f}) |")
    lines += ["", "Recall of the point per measured band (estimated exactly / measured):", ""]
    for key, name in estimators:
        s = read[key]
        if s["runs"]:
            lines.append(f"- {name}: " + ", ".join(f"{b.replace('_', ' ')} {k}/{m}" for b, (k, m) in s["recall"].items()))
    return lines
