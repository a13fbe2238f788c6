"""A run stopped before its budget (Ctrl-C, SIGTERM, a timeout) is unfinished: its band says so.

The images of an attack stopped at iteration 6 of 400 show what 6 iterations recovered, not what the update leaks:
an estimate or a measurement read from them can only under-report. Issue 90 found SIGTERM at iteration 6 writing
"low, range low .. low, confidence 0.96". So an unfinished run's band keeps its point (what was recovered so far)
but its range opens upward to very high (nothing above the point is ruled out) and its confidence is at most a
uniform guess over the four bands (``CONFIDENCE_CAP``): the evidence is of an attack that did not run.
"""

from __future__ import annotations

from typing import Any

from fedaudit.metrics.risk import BANDS

CONFIDENCE_CAP = round(1 / len(BANDS), 3)


def note(done: int, budget: int) -> str:
    """The one line every unfinished band carries."""
    return (f"unfinished: the attack was stopped after {done} of {budget} iterations, so the upper end is opened to "
            f"very high and the confidence held at {CONFIDENCE_CAP} or below; run it to its budget for a verdict")


def opened(band_range: Any) -> Any:
    """``band_range`` ([lower, upper] bands) with its upper end at very high (None stays None)."""
    return None if band_range is None else [band_range[0], "very_high"]


def capped(confidence: float | None) -> float | None:
    return None if confidence is None else min(confidence, CONFIDENCE_CAP)
