"""FedLeak's leakage risk bands by PSNR (dB): >= 20 very high, 15-20 high, 10-15 medium, < 10 low."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

BANDS = ("low", "medium", "high", "very_high")  # in increasing order of risk
THRESHOLDS = {"medium": 10.0, "high": 15.0, "very_high": 20.0}
SOURCE = "FedLeak (Table 2 / Sec. 6): PSNR >= 20 Very High, 15-20 High, 10-15 Medium, < 10 Low"


def band_of(value: float, cuts: dict[str, float]) -> str:
    """The band of ``value`` given each band's lower cut (ascending; below the first: low)."""
    band = "low"
    for name, lo in cuts.items():
        if value >= lo:
            band = name
    return band


def risk_band(psnr_db: float) -> str:
    return band_of(psnr_db, THRESHOLDS)


def worst_band(bands: Iterable[str | None]) -> str | None:
    """The riskiest of ``bands`` (None entries skipped; None when there is none)."""
    present = [b for b in bands if b]
    return max(present, key=BANDS.index) if present else None


def at_or_above(band: str, threshold: str) -> bool:
    """``--fail-on`` test: is ``band`` at least as risky as ``threshold``?"""
    return BANDS.index(band) >= BANDS.index(threshold)


GATES = ("upper", "point", "lower")  # which end of a band range --fail-on tests; upper first: the default


def gated(point: str, band_range: Sequence[str] | None, gate: str) -> str:
    """The band ``--gate`` picks from a point and its [lower, upper] range (the point when there is no range)."""
    if gate not in GATES:
        raise ValueError(f"gate must be one of {', '.join(GATES)}, got {gate!r}")
    if gate == "point" or not band_range:
        return point
    return band_range[0] if gate == "lower" else band_range[1]
