"""The measured risk band as an interval: a point and a [lower, upper] range, each end backed by a statistic.

The band reads two things per matched image (docs/metrics.md, "The measured band"):

* **PSNR against the blank floor.** FedLeak's bands (fedaudit/metrics/risk.py) on the batch's mean PSNR, counted only
  where the mean clears the mean blank floor (a constant image's PSNR against the same images): a mean at or below
  the floor is "low" whatever its FedLeak band, since a constant image scores it too.
* **Identification** (fedaudit/metrics/identification.py): an image is identified when its own original is its
  LPIPS-nearest candidate and it beats a blank; *firm* when that holds for the image shifted by one pixel in each
  direction too, *possible* when it holds for the image or any such shift (the judge's own uncertainty).

Aggregated over the batch:

* the **point** is the worse of the PSNR band of the mean and the identification band of the identified rate, the
  latter counted only when that rate is beyond the chance of its nulls: a one-sided binomial test (p < ``ALPHA``)
  against the larger of the candidate chance 1 / candidates and the best null reference's rate (the attack's
  initialisation, a blank, the batch mean), that rate taken as (k + 1/2) / (n + 1) so a null of 0 of 1 is not a
  certain 0. One identification at B = 1 is never beyond chance by itself (p >= 0.25); PSNR decides the point.
* the **lower end** is the worse of the bootstrap's lower PSNR band and the band of the Wilson lower bound on the
  *firm* rate (where that count is beyond chance): a level claimed at the lower end is established.
* the **upper end** is the worse of the bootstrap's upper PSNR band and the band of the *possible* rate: what a
  reviewer might recognise in this batch. The batch under audit is the population of the identification's upper end
  (a sampling bound on 1 of 4 binary outcomes reaches 0.7 and would call any noise "high"), so its width there is
  the judge's uncertainty.

The bootstrap resamples images with replacement (``DRAWS`` draws, seeded: the same batch gives the same interval)
and reads each draw's band; the ends are its ``(1 - LEVEL) / 2`` and ``(1 + LEVEL) / 2`` quantiles.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedaudit.metrics.identification import identification_band
from fedaudit.metrics.risk import BANDS, risk_band

LEVEL = 0.95  # two-sided level of every interval here
ALPHA = 0.05  # one-sided level of "beyond chance"
DRAWS = 2000
Z = 1.959963984540054  # the standard normal's (1 + LEVEL) / 2 quantile, for Wilson's interval

METHOD = ("point: worse of the PSNR band (counted above the blank floor only) and the identification band (counted "
          f"only when beyond chance of its nulls, one-sided binomial p < {ALPHA}); range: {LEVEL:.0%} bootstrap over "
          "images for PSNR, the possible-identification rate (upper end), Wilson's lower bound on the firm "
          "identification rate where beyond chance (lower end)")


def wilson(k: int, n: int, z: float = Z) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion k / n (``(0, 1)`` when n = 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def beyond_chance(k: int, n: int, k_null: int, chance: float) -> float:
    """One-sided binomial p-value of k or more of n identified when each is identified with probability
    max(chance, (k_null + 1/2) / (n + 1))."""
    from scipy.stats import binomtest

    if n <= 0:
        return 1.0
    p0 = min(max(chance, (k_null + 0.5) / (n + 1)), 1.0)
    return float(binomtest(k, n, p0, alternative="greater").pvalue)


def _draws(n: int, seed: int) -> torch.Tensor:
    """Bootstrap resamples of n images: [DRAWS, n] indices (the identity alone when n = 1)."""
    if n <= 1:
        return torch.zeros(1, max(n, 1), dtype=torch.long, device="cpu")
    return torch.randint(n, (DRAWS, n), generator=torch.Generator().manual_seed(seed), device="cpu")


def mean_interval(values: torch.Tensor | None, seed: int = 0) -> list[float] | None:
    """The bootstrap ``LEVEL`` interval of the mean of ``values`` over images, or None."""
    if values is None or values.numel() == 0:
        return None
    means = values.double()[_draws(values.numel(), seed)].mean(1)
    lo, hi = torch.quantile(means, torch.tensor([(1 - LEVEL) / 2, (1 + LEVEL) / 2], dtype=torch.float64,
                                              device=means.device)).tolist()
    return [float(lo), float(hi)]


def psnr_band(mean_psnr: float, mean_floor: float) -> str:
    """FedLeak's band of a mean PSNR, counted only above the mean blank floor."""
    return risk_band(mean_psnr) if mean_psnr > mean_floor else "low"


def _quantile_level(levels: torch.Tensor, q: float) -> str:
    return BANDS[int(torch.quantile(levels.double(), q, interpolation="lower" if q < 0.5 else "higher"))]


def measured_band(psnr: torch.Tensor, floor: torch.Tensor, ident: dict[str, Any] | None,
                  seed: int = 0) -> dict[str, Any]:
    """The measured band of a batch: ``band`` (point), ``range`` [lower, upper] and how each was read (module
    docstring). ``psnr``/``floor``: per matched image; ``ident``: identify()'s result (None or a null rate: PSNR
    only)."""
    n = psnr.numel()
    p, f = psnr.double(), floor.double()
    idx = _draws(n, seed)
    draw_p, draw_f = p[idx].mean(1), f[idx].mean(1)
    levels = torch.tensor([BANDS.index(psnr_band(float(a), float(b))) for a, b in zip(draw_p, draw_f)], device="cpu")
    mean_p, mean_f = float(p.mean()), float(f.mean())
    psnr_part = {"band": psnr_band(mean_p, mean_f), "lower": _quantile_level(levels, (1 - LEVEL) / 2),
                 "upper": _quantile_level(levels, (1 + LEVEL) / 2), "mean_psnr": mean_p, "mean_floor": mean_f,
                 "above_floor": mean_p - mean_f, "psnr_interval": mean_interval(psnr, seed),
                 "above_floor_interval": mean_interval(psnr - floor, seed)}
    parts = [psnr_part["band"]]
    lowers, uppers = [psnr_part["lower"]], [psnr_part["upper"]]
    ident_part: dict[str, Any] | None = None
    if ident and ident.get("rate") is not None:
        k, k_firm, k_possible = ident["identified"], ident["firm"], ident["possible"]
        of = ident["of"]
        k_null = max([v["identified"] for v in ident.get("nulls", {}).values()] + [0])
        p_value = beyond_chance(k, of, k_null, ident["chance"])
        p_firm = beyond_chance(k_firm, of, k_null, ident["chance"])
        firm_lo = wilson(k_firm, of)[0]
        ident_part = {"band": identification_band(k / of) if p_value < ALPHA else "low",
                      "lower": identification_band(firm_lo) if p_firm < ALPHA else "low",
                      "upper": identification_band(k_possible / of),
                      "rate": k / of, "p_value": p_value, "beyond_chance": p_value < ALPHA, "null_identified": k_null,
                      "firm": k_firm, "firm_rate_lower": firm_lo, "firm_p_value": p_firm, "possible": k_possible,
                      "rate_interval": list(wilson(k, of))}
        parts.append(ident_part["band"])
        lowers.append(ident_part["lower"])
        uppers.append(ident_part["upper"])
    point = max(parts, key=BANDS.index)
    lower = min(max(lowers, key=BANDS.index), point, key=BANDS.index)
    upper = max(max(uppers, key=BANDS.index), point, key=BANDS.index)
    return {"band": point, "range": [lower, upper], "width": BANDS.index(upper) - BANDS.index(lower),
            "psnr": psnr_part, "identification": ident_part, "why": _why(psnr_part, ident_part, ident),
            "method": METHOD, "level": LEVEL}


def _why(psnr_part: dict[str, Any], ident_part: dict[str, Any] | None, ident: dict[str, Any] | None) -> str:
    """One sentence a reviewer can read: what set the point and the ends."""
    lo, hi = psnr_part["psnr_interval"]
    s = (f"PSNR {psnr_part['mean_psnr']:.1f} dB [{lo:.1f}, {hi:.1f}], {psnr_part['above_floor']:+.1f} dB against the "
         f"blank floor: {psnr_part['band'].replace('_', ' ')}")
    if ident_part is None:
        reason = (ident or {}).get("reason")
        return s + (f"; identification not measured ({reason}): PSNR alone" if reason else "; PSNR alone")
    verdict = "beyond chance" if ident_part["beyond_chance"] else "not beyond chance"
    assert ident is not None  # ident_part is read from it
    return (s + f"; identified {ident['identified']} of {ident['of']} (firm {ident_part['firm']}, possible "
            f"{ident_part['possible']}; best null {ident_part['null_identified']}), {verdict} "
            f"(p = {ident_part['p_value']:.2g}): {ident_part['band'].replace('_', ' ')}")

