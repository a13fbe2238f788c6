"""Leakage bands of a text reconstruction, beside the image bands (docs/metrics.md, "Text bands").

Measured against the truth, two channels, the worse one counts:

* **words**: the batch's mean ROUGE-1 F of matched pairs (the papers' headline): >= 0.9 very high (nearly every word
  of every sequence), >= 0.6 high (most of them), >= 0.3 medium (the topic), below low. A choice: the papers report
  ROUGE-1 but set no bands; these cut where a reader of the recovered text learns the sentence, most of it, or its
  subject;
* **sequences**: the exact-sequence rate: half the batch or more verbatim is very high, at least one sequence verbatim
  high (a client's sentence is out, word for word), none low.

The range is the worse channel at each end of its interval: a 95% bootstrap over sequences for ROUGE-1 (the image
bands' resampling, fedaudit/metrics/band.py) and Wilson's interval for the exact rate.

Without the truth, DAGER's own certificate: a sequence that passes every span check of both blocks is the client's,
word for word (a vector outside the span passes the 1e-3 check only by accident; docs/text.md). So c certified of B
reads as the exact channel above (c / B); the upper end stays very high while any sequence is uncertified (what the
search did not recover, another attack might). Nothing certified (a saturated or inconsistent search, or an attack
that certifies nothing) is no evidence of safety: the range is the whole scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedaudit.metrics.band import mean_interval, wilson
from fedaudit.metrics.risk import BANDS, band_of, worst_band

ROUGE_CUTS = {"medium": 0.3, "high": 0.6, "very_high": 0.9}
HALF = 0.5  # an exact rate at or above it is very high


def rouge_band(rouge1: float) -> str:
    return band_of(rouge1, ROUGE_CUTS)


def exact_band(rate: float) -> str:
    return "very_high" if rate >= HALF else ("high" if rate > 0 else "low")


@dataclass(frozen=True)
class TextBand:
    band: str
    range: list[str]
    why: str


def measured_text_band(rouge1: list[float], exact: list[float], seed: int = 0) -> TextBand:
    """The measured band of a batch from its per-sequence ROUGE-1 F and exact flags (unmatched sequences: 0)."""
    n = len(rouge1)
    mean = sum(rouge1) / n if n else 0.0
    k = int(sum(exact))
    rate = k / n if n else 0.0
    lo_r, hi_r = mean_interval(torch.tensor(rouge1, dtype=torch.float64, device="cpu"), seed) or [0.0, 0.0]
    lo_e, hi_e = wilson(k, n)
    point = worst_band([rouge_band(mean), exact_band(rate)]) or "low"
    lower = worst_band([rouge_band(lo_r), exact_band(lo_e if k else 0.0)]) or "low"
    upper = worst_band([rouge_band(hi_r), exact_band(hi_e)]) or "low"
    lower = min(lower, point, key=BANDS.index)
    upper = max(upper, point, key=BANDS.index)
    return TextBand(point, [lower, upper], f"ROUGE-1 {mean:.3f} (95% bootstrap {lo_r:.3f}..{hi_r:.3f}); "
                                           f"{k} of {n} sequences exact (Wilson {lo_e:.2f}..{hi_e:.2f})")


def estimated_text_band(certified: int, batch_size: int | None, reason: str | None = None,
                        held: str | None = None, premise: str | None = None) -> TextBand:
    """The truth-free band from the number of sequences the attack certified (module docstring): ``batch_size`` is
    how many lines the update holds (a delta's K x B), ``held`` says so in words (default "B = <batch_size>").
    ``premise``: why the attack's own premise may have failed (dropout in train mode): nothing certified then is no
    reading at all, so the point is the upper end, not "low" (issue 90)."""
    if certified <= 0 and premise and not reason:
        return TextBand("very_high", ["low", "very_high"], f"nothing certified, and the attack's premise may not "
                        f"hold ({premise}): not evidence of safety")
    if certified <= 0:
        return TextBand("low", ["low", "very_high"], "nothing certified" + (f" ({reason})" if reason else "")
                        + ": no evidence either way")
    if batch_size:
        rate = min(certified / batch_size, 1.0)
        point = exact_band(rate)
        why = f"{certified} of {held or f'B = {batch_size}'} sequences passed every exact check"
        if certified >= batch_size:
            return TextBand(point, [point, point], why + ": the whole batch, word for word")
        return TextBand(point, [point, "very_high"], why + "; the others may leak by other means")
    return TextBand("high", ["high", "very_high"], f"{certified} sequences passed every exact check (B unknown)")
