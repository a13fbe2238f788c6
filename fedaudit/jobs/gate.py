"""What ``--fail-on`` tests: one end of a report's band range, and the line that says which and why."""

from __future__ import annotations

from typing import Any

from fedaudit.metrics.risk import gated


def fail_on_band(report: dict[str, Any], gate: str) -> dict[str, Any]:
    """What ``--fail-on`` tests: the measured range with the truth, else the estimated one, at the ``gate`` end,
    and one line that says which band, which end and why."""
    m = report.get("metrics") or {}
    verdict = (report.get("evidence") or {}).get("verdict") or {}
    if m.get("risk_band"):
        point, band_range, kind, source = m["risk_band"], m.get("risk_band_range"), "measured", "measured against the truth"
    elif verdict.get("band"):
        point, band_range, kind = verdict["band"], verdict.get("range"), "estimated"
        source = f"estimated without the truth, {verdict.get('source')}"
    else:
        return {"band": None, "gate": gate, "source_kind": None, "line": None}
    band = gated(point, band_range, gate)
    why = {"upper": "the upper end: an auditor takes a false alarm over a false 'safe'",
           "point": "the point: --gate point", "lower": "the lower end: only what is established, --gate lower"}[gate]
    shown = f"{point} [{band_range[0]} .. {band_range[1]}]" if band_range else point
    return {"band": band, "gate": gate, "source_kind": kind, "point": point, "range": band_range, "source": source,
            "line": f"--fail-on reads {band} ({why}) of the {kind} band {shown}; {source}"}
