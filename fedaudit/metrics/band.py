"""The measured risk band as an interval: a point and a [lower, upper] range, each end backed by a statistic.

The band reads two things per matched image (docs/metrics.md, "The measured band"):

* **PSNR against the floor** (fedaudit/metrics/blank.py): each image's floor is the best PSNR of the uninformative
  null references (black, gray, the image's own mean colour, the public images' mean image as is and recoloured).
  FedLeak's bands (fedaudit/metrics/risk.py) of the batch's mean PSNR count only where the mean clears the mean floor
  by ``MARGIN_DB``: a few tenths of a dB over what a flat image of the right colour scores is not leakage.
* **Identification** (fedaudit/metrics/identification.py): an image is identified when its own original is its
  LPIPS-nearest candidate and it beats a blank, read in five *views* (the image and its four one-pixel shifts, a
  change no viewer notices); ``views`` counts the identified images in each.

The batch under audit is the population: with the truth given, its mean PSNR and its identified count are not
samples of anything, so the range is the *judge's* uncertainty, not a sampling interval:

* the **point** is the worse of the PSNR band and the identification band of the identified rate, the latter counted
  only when beyond the chance of its nulls: a one-sided binomial test (p < ``ALPHA``) against the larger of the
  candidate chance 1 / candidates and the best null reference's rate (the attack's initialisation, a blank, the
  batch mean), that rate taken as (k + 1/2) / (n + 1) so a null of 0 of 1 is not a certain 0. One identification
  at B = 1 is never beyond chance by itself (p >= 0.25); PSNR decides the point.
* the **lower end** is the worse of the PSNR point and the identification band of the view with the fewest
  identified images (where that count is beyond chance): what every imperceptible reading agrees on.
* the **upper end** is the worse of the PSNR band read without the margin (a mean between the floor and the margin
  is within the judge's tolerance: not counted, not ruled out) and the identification band of the view with the
  most identified images (at B >= 2 only where that count is beyond chance of the nulls): what a reviewer might
  recognise in this batch.

So the range is wide only where the judge is: at B = 1 (one image; its identification under some view cannot be
beyond chance but is not ruled out) or where a one-pixel shift moves most of a batch across a rank. The bootstrap
interval of the mean PSNR over images (``psnr_interval``, seeded) is still reported, as how much one image carries
the mean, but no longer sets an end: at B = 2 a batch of one perfect and one failed image spanned low .. very high.
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

MARGIN_DB = 1.0  # a mean PSNR counts only this far above the mean floor (the judge's tolerance; issue 86)

METHOD = (f"point: worse of the PSNR band (counted only {MARGIN_DB:g} dB above the floor of null references) and the "
          f"identification band (counted only when beyond chance of its nulls, one-sided binomial p < {ALPHA}); range: "
          "the judge's uncertainty over this batch (the population): lower end the PSNR point and the identification "
          "band of the strictest of five one-pixel views where beyond chance, upper end the PSNR band without the "
          "margin and the identification band of the most lenient view")


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


def psnr_band(mean_psnr: float, mean_floor: float, margin: float = MARGIN_DB) -> str:
    """FedLeak's band of a mean PSNR, counted only ``margin`` dB or more above the mean floor."""
    return risk_band(mean_psnr) if mean_psnr - mean_floor >= margin else "low"


def _views(ident: dict[str, Any]) -> list[int]:
    """Identified count in each view (the image, then its shifts); from the flags when an older result lacks them."""
    views = ident.get("views")
    if views:
        return [int(v) for v in views]
    return [int(ident["firm"]), int(ident["identified"]), int(ident["possible"])]


def measured_band(psnr: torch.Tensor, floor: torch.Tensor, ident: dict[str, Any] | None,
                  seed: int = 0) -> dict[str, Any]:
    """The measured band of a batch: ``band`` (point), ``range`` [lower, upper] and how each was read (module
    docstring). ``psnr``/``floor``: per matched image; ``ident``: identify()'s result (None or a null rate: PSNR
    only)."""
    p, f = psnr.double(), floor.double()
    mean_p, mean_f = float(p.mean()), float(f.mean())
    above = p - f
    point_psnr = psnr_band(mean_p, mean_f)
    psnr_part = {"band": point_psnr, "lower": point_psnr, "upper": psnr_band(mean_p, mean_f, margin=1e-9),
                 "mean_psnr": mean_p, "mean_floor": mean_f, "above_floor": mean_p - mean_f, "margin_db": MARGIN_DB,
                 "images_clearing": int((above >= MARGIN_DB).sum()), "of": int(p.numel()),
                 "psnr_interval": mean_interval(psnr, seed), "above_floor_interval": mean_interval(psnr - floor, seed)}
    parts = [psnr_part["band"]]
    lowers, uppers = [psnr_part["lower"]], [psnr_part["upper"]]
    ident_part: dict[str, Any] | None = None
    if ident and ident.get("rate") is not None:
        k, of = ident["identified"], ident["of"]
        views = _views(ident)
        k_null = max([v["identified"] for v in ident.get("nulls", {}).values()] + [0])
        p_value = beyond_chance(k, of, k_null, ident["chance"])
        p_strict = beyond_chance(min(views), of, k_null, ident["chance"])
        p_lenient = beyond_chance(max(views), of, k_null, ident["chance"])
        # the most lenient view bounds the upper end where it is beyond chance of the nulls; at B = 1 it never can be
        # (p >= 0.25), so there it is "not ruled out" all the same: the one place a whole-scale range is the judge's
        # honest doubt. At B >= 2 a count the nulls reach as often is no doubt about this batch (issue 86: a B = 2
        # ViT run read low .. very high from one shifted view while the batch mean was identified as often)
        lenient = of == 1 or p_lenient < ALPHA
        ident_part = {"band": identification_band(k / of) if p_value < ALPHA else "low",
                      "lower": identification_band(min(views) / of) if p_strict < ALPHA else "low",
                      "upper": identification_band(max(views) / of) if lenient else "low",
                      "rate": k / of, "p_value": p_value, "beyond_chance": p_value < ALPHA, "null_identified": k_null,
                      "views": views, "strictest_view": min(views), "strictest_p_value": p_strict,
                      "most_lenient_view": max(views), "most_lenient_p_value": p_lenient, "firm": ident["firm"], "possible": ident["possible"],
                      "rate_interval": list(wilson(k, of))}
        parts.append(ident_part["band"])
        lowers.append(ident_part["lower"])
        uppers.append(ident_part["upper"])
    point = max(parts, key=BANDS.index)
    lower = min(max(lowers, key=BANDS.index), point, key=BANDS.index)
    upper = max(max(uppers, key=BANDS.index), point, key=BANDS.index)
    width = BANDS.index(upper) - BANDS.index(lower)
    return {"band": point, "range": [lower, upper], "width": width,
            "psnr": psnr_part, "identification": ident_part, "why": _why(psnr_part, ident_part, ident),
            "narrow": _narrow(psnr_part, ident_part, width), "method": METHOD, "level": LEVEL}


def _narrow(psnr_part: dict[str, Any], ident_part: dict[str, Any] | None, width: int) -> str | None:
    """What would narrow a range of two levels or more (None when it is narrower): the judge's doubt it rests on."""
    if width < 2:
        return None
    says = []
    if psnr_part["upper"] != psnr_part["lower"]:
        says.append(f"the mean PSNR is {psnr_part['above_floor']:+.1f} dB from the floor, inside the {MARGIN_DB:g} dB "
                    "margin: a longer run that moves it clear of the floor either way settles it")
    if ident_part is not None and ident_part["upper"] != ident_part["lower"]:
        of = psnr_part["of"]
        if of == 1:
            says.append("one image: its identification can never be beyond chance, so it is 'not ruled out' rather "
                        "than counted; audit a batch of two or more (or read the image yourself)")
        else:
            says.append(f"the identification judge changes its reading under one-pixel shifts ({ident_part['strictest_view']}"
                        f" to {ident_part['most_lenient_view']} of {of} identified): more iterations or restarts that "
                        "sharpen the images settle it")
    return "; ".join(says) or None


def _why(psnr_part: dict[str, Any], ident_part: dict[str, Any] | None, ident: dict[str, Any] | None) -> str:
    """One sentence a reviewer can read: what set the point and the ends."""
    lo, hi = psnr_part["psnr_interval"]
    s = (f"PSNR {psnr_part['mean_psnr']:.1f} dB [{lo:.1f}, {hi:.1f}], {psnr_part['above_floor']:+.1f} dB against the "
         f"floor of null references ({psnr_part['images_clearing']} of {psnr_part['of']} images clear it by "
         f"{MARGIN_DB:g} dB): {psnr_part['band'].replace('_', ' ')}")
    if ident_part is None:
        reason = (ident or {}).get("reason")
        return s + (f"; identification not measured ({reason}): PSNR alone" if reason else "; PSNR alone")
    verdict = "beyond chance" if ident_part["beyond_chance"] else "not beyond chance"
    assert ident is not None  # ident_part is read from it
    return (s + f"; identified {ident['identified']} of {ident['of']} (from {ident_part['strictest_view']} to "
            f"{ident_part['most_lenient_view']} under one-pixel shifts; best null {ident_part['null_identified']}), {verdict} "
            f"(p = {ident_part['p_value']:.2g}): {ident_part['band'].replace('_', ' ')}")

