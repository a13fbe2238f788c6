"""The estimated risk band: a frozen rule from truth-free evidence to a band and how sure it is.

1. A *score*, in dB: a ridge regression of the run's mean PSNR on ten truth-free features (``features``): the
   gradient distance of the result relative to a blank image's and to random images' (log10), the number of
   images (log2), the restart agreement PSNR and whether there was one, the result's contrast, its total
   variation relative to noise's, the label agreement, and the blank floor and "unrelated" PSNR that the
   checkpoint's normalisation (the training data's mean and std) implies.
2. *Cut points* on the score give the band (``cuts``: low below the first, very high from the third). They are
   fitted, not FedLeak's 10/15/20 dB, because the measured band is also raised by identification and because
   under-reporting is the costly error: the cut points maximise exact agreement with the measured band on the
   fitting runs subject to at most 3% under-reports.
3. ``confidence``: on the fitting runs given this estimate, the share whose measured band was the same;
   ``p_higher``: the share whose measured band was higher (an under-report); both Laplace-smoothed.
4. ``range``: the bands of the score +- 1.645 residual standard deviations (the fit's ``residual_std_db``).

This rule is the *uncalibrated* estimate: by default a run places itself among proxy batches captured through the
same checkpoint with the update's recipe (fedaudit/verdict/calibrated.py), and the rule is what is left when there
are none (``--proxies 0``, or no public images of the input's shape). Out of its grid it under-reported 29% of runs
(docs/results/verdict.md).

Fitted by ``benchmarks/verdict.py --fit`` on runs whose truth is known, then frozen here (``FIT``); the
calibration on held-out runs (other images) is in docs/results/verdict.md.

Caveats: when the label self-check (``--self-check``; fedaudit/verdict/label_self_check.py) finds the attack's labels
no better than a guess, the verdict says so: the images were fitted to those labels, so the band may under-report.
The rule's features do not change (the fitting runs had no self-check).

Overrides: an exact closed-form input recovery (fedaudit/verdict/channels.py) is ``very_high`` with confidence
0.99. Without reconstructed images (an attack that stopped at features) there is no estimate, and the report
says why.
"""

from __future__ import annotations

import math
from typing import Any

from fedaudit.metrics.risk import BANDS

FEATURES = ("log10_relative_distance", "log10_relative_to_random", "log2_images", "has_agreement", "agreement",
            "contrast", "tv_ratio", "label_agreement", "floor_psnr", "unrelated_psnr")

# Fitted by ``python -m benchmarks.verdict --fit`` (docs/results/verdict.md); frozen: refit only with a new table.
FIT: dict[str, Any] = {
    # intercept, then FEATURES in order
    "w": [-2.21121, -0.50102, -2.3934, -0.406, -0.35363, 0.92661, 1.06041, -2.16676, 1.21216, -0.0079, 1.16095],
    "cuts": [9.89, 13.27, 13.42],
    "table": {
        "low": {"runs": 80, "same": 78, "higher": 2},
        "medium": {"runs": 40, "same": 32, "higher": 1},
        "high": {"runs": 2, "same": 1, "higher": 0},
        "very_high": {"runs": 28, "same": 12, "higher": 0},
    },
    "runs": 150, "ridge": 1.0, "target_under": 0.03, "residual_std_db": 1.337,
}


def features(evidence: dict[str, Any]) -> dict[str, float] | None:
    """The rule's inputs from a report's evidence, or None when there are no images to judge."""
    rec = evidence.get("reconstruction") or {}
    ex = rec.get("explained")
    if not ex:
        return None

    def log_ratio(v: float) -> float:
        return math.log10(min(max(v, 1e-4), 3.0)) if math.isfinite(v) else 0.0

    agree = rec.get("restart_agreement")
    nat = rec.get("naturalness") or {}
    labels = evidence.get("labels") or {}
    prior = rec.get("data_prior") or {}
    return {
        "log10_relative_distance": log_ratio(ex["relative_distance"]),
        "log10_relative_to_random": log_ratio(ex["relative_to_random"]),
        "log2_images": math.log2(max(rec["num_images"], 1)),
        "has_agreement": 1.0 if agree else 0.0,
        "agreement": (min(max(agree["psnr"], 0.0), 40.0) - 20.0) / 10.0 if agree else 0.0,
        "contrast": 10.0 * nat.get("contrast", 0.0),
        "tv_ratio": nat.get("tv", 0.0) / max(nat.get("tv_noise", 1.0), 1e-12),
        "label_agreement": labels["agreement"] if labels.get("agreement") is not None else 0.5,
        "floor_psnr": prior.get("floor", 10.0),
        "unrelated_psnr": prior.get("unrelated", 10.0),
    }


def score(x: dict[str, float], fit: dict[str, Any] | None = None) -> float:
    """The rule's predicted PSNR (dB)."""
    fit = fit or FIT
    return fit["w"][0] + sum(w * x[f] for w, f in zip(fit["w"][1:], FEATURES))


def band_of(value: float, cuts: list[float]) -> str:
    return BANDS[sum(value >= c for c in cuts)]


RANGE_Z = 1.6448536269514722  # the rule's range: its score +- this many residual standard deviations (90%, 95% one-sided)


def rule_range(value: float, fit: dict[str, Any] | None = None) -> list[str]:
    """[lower, upper] band of the rule's score widened by its residual spread on the fitting runs."""
    fit = fit or FIT
    spread = RANGE_Z * fit["residual_std_db"]
    return [band_of(value - spread, fit["cuts"]), band_of(value + spread, fit["cuts"])]


def reliability(band: str, fit: dict[str, Any] | None = None) -> tuple[float, float]:
    """(confidence, p_higher) of an estimate ``band`` from the fitting runs' table, Laplace-smoothed."""
    row = (fit or FIT)["table"][band]
    p_higher = 0.0 if band == BANDS[-1] else (row["higher"] + 1) / (row["runs"] + 2)
    return (row["same"] + 1) / (row["runs"] + 2), p_higher


def caveats(evidence: dict[str, Any]) -> list[str]:
    """What the estimate cannot see in the evidence but a reviewer should know (module docstring)."""
    why = (((evidence.get("labels") or {}).get("self_check")) or {}).get("near_guess")
    if not why:
        return []
    return [f"the labels the attack used may be misread (self-check: {why}); the images were fitted to them, so this "
            "band may under-report: re-run with labels from another method or a labels file"]


def estimate(evidence: dict[str, Any], fit: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"band", "confidence", "p_higher", ...}`` from the evidence (no truth), with ``caveats`` where any."""
    out = _estimate(evidence, fit)
    notes = caveats(evidence)
    return {**out, "caveats": notes} if notes else out


def _estimate(evidence: dict[str, Any], fit: dict[str, Any] | None = None) -> dict[str, Any]:
    fit = fit or FIT
    analytic = (evidence.get("channels") or {}).get("analytic_input") or {}
    if analytic.get("exact"):
        return {"band": "very_high", "range": ["very_high", "very_high"], "confidence": 0.99, "p_higher": 0.0,
                "source": "analytic input recovery",
                "why": "a linear first layer gives the input in closed form, every row agreeing"}
    x = features(evidence)
    if x is None:
        return {"band": None, "range": None, "confidence": None, "p_higher": None, "source": None,
                "why": "no reconstructed images to judge"}
    value = score(x, fit)
    band = band_of(value, fit["cuts"])
    confidence, p_higher = reliability(band, fit)
    return {"band": band, "range": rule_range(value, fit), "confidence": round(confidence, 3),
            "p_higher": round(p_higher, 3), "score_db": round(value, 2), "cuts_db": fit["cuts"], "features": x,
            "source": "uncalibrated rule (fitted on benchmark runs, docs/results/verdict.md)"}
