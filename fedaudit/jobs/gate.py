"""What ``--fail-on`` tests: one end of a report's band range, and the line that says which and why."""

from __future__ import annotations

from collections.abc import Sequence

from fedaudit.metrics.risk import gated
from fedaudit.report.run_report import FailOn, Measured, Verdict


def fail_on_band(metrics: Measured | None, verdict: Verdict | None, gate: str) -> FailOn:
    """What ``--fail-on`` tests: the measured range with the truth, else the estimated one, at the ``gate`` end,
    and one line that says which band, which end and why."""
    if metrics is not None and metrics.risk_band:
        point, band_range, kind, source = metrics.risk_band, metrics.risk_band_range, "measured", "measured against the truth"
    elif verdict is not None and verdict.band:
        point, band_range, kind = verdict.band, verdict.range, "estimated"
        source = f"estimated without the truth, {verdict.source}"
    else:
        return FailOn(band=None, gate=gate, source_kind=None)  # type: ignore[arg-type]
    return gate_on(point, band_range, kind, source, gate)


def gate_on(point: str, band_range: Sequence[str] | None, kind: str, source: str, gate: str) -> FailOn:
    """The ``gate`` end of a band range (``kind``: measured or estimated), with the line that says which and why."""
    band = gated(point, band_range, gate)
    why = {"upper": "the upper end: an auditor takes a false alarm over a false 'safe'",
           "point": "the point: --gate point", "lower": "the lower end: only what is established, --gate lower"}[gate]
    shown = f"{point} [{band_range[0]} .. {band_range[1]}]" if band_range else point
    return FailOn(band=band, gate=gate, source_kind=kind, point=point, range=list(band_range) if band_range else None, source=source,  # type: ignore[arg-type]
                  line=f"--fail-on reads {band} ({why}) of the {kind} band {shown}; {source}")
