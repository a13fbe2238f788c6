"""Score reconstructions against ground truth: match one-to-one, then PSNR/SSIM/LPIPS and the risk band."""

from __future__ import annotations

from typing import Any

import torch

from fedaudit.metrics import ssim as ssim_mod
from fedaudit.metrics.band import MARGIN_DB, mean_interval, measured_band, psnr_band
from fedaudit.metrics.band import METHOD as BAND_METHOD
from fedaudit.metrics.blank import METHOD as BLANK_METHOD
from fedaudit.metrics.blank import blank_baseline, floor_per_image
from fedaudit.metrics.identification import METHOD as IDENT_METHOD
from fedaudit.metrics.identification import identify, judge_net
from fedaudit.metrics.lpips import load_lpips, lpips_distance
from fedaudit.metrics.matching import BEST_MATCH_METHOD, best_match, match
from fedaudit.metrics.matching import METHOD as MATCHING_METHOD
from fedaudit.metrics.psnr import psnr
from fedaudit.metrics.risk import BANDS, risk_band
from fedaudit.metrics.risk import SOURCE as RISK_SOURCE


def _stats(values: torch.Tensor | None, seed: int = 0) -> dict[str, Any] | None:
    if values is None or values.numel() == 0:
        return None
    v = values.double()
    return {"mean": float(v.mean()), "std": float(v.std(unbiased=False)), "min": float(v.min()), "max": float(v.max()),
            "mean_interval": mean_interval(v, seed)}


def _best_match_summary(recon: torch.Tensor, truth: torch.Tensor) -> dict[str, Any]:
    pairs = best_match(recon, truth)
    a = recon[torch.tensor([r for _, r in pairs], device=recon.device)].float().cpu()
    b = truth[torch.tensor([t for t, _ in pairs], device=truth.device)].float().cpu()
    return {"psnr": _stats(psnr(a, b)), "ssim": _stats(ssim_mod.ssim(a, b)),
            "distinct_reconstructions": len({r for _, r in pairs})}


def evaluate_images(recon: torch.Tensor, truth: torch.Tensor, lpips_net: str = "vgg",
                    lpips_weights: str | None = None, attacked_arch: str | None = None,
                    init: torch.Tensor | None = None, seed: int = 0) -> dict[str, Any]:
    """Per-image and summary metrics, and the measured band as a point and a range (fedaudit/metrics/band.py):
    PSNR against the blank floor and identification against its nulls (``init``: the attack's starting images,
    one of the nulls; ``seed``: the bootstrap's)."""
    pairs = match(recon, truth)
    t_idx = torch.tensor([t for t, _ in pairs], device="cpu")
    r_idx = torch.tensor([r for _, r in pairs], device="cpu")
    a, b = recon[r_idx.to(recon.device)].float().cpu(), truth[t_idx.to(truth.device)].float().cpu()
    p, s = psnr(a, b), ssim_mod.ssim(a, b)
    lp_model = load_lpips(lpips_net, lpips_weights)
    lp = lpips_distance(lp_model, a, b)
    blank = blank_baseline(truth)
    judge = judge_net(attacked_arch, lpips_net)
    ident = identify(recon, truth, pairs, judge, lpips_weights if judge == lpips_net else None, init=init)
    found = {row["recon_index"]: row for row in ident.get("per_image", [])}
    floor, floor_by = floor_per_image(b)
    rows = []
    for i, (t, r) in enumerate(pairs):
        judged = found.get(int(r)) or {}
        rows.append({"truth_index": int(t), "recon_index": int(r), "psnr": float(p[i]), "blank_psnr": float(floor[i]),
                     "floor_set_by": floor_by[i], "above_floor": float(p[i] - floor[i]), "ssim": float(s[i]),
                     "lpips": None if lp is None else float(lp[i]), "identified": judged.get("identified"),
                     "identification_rank": judged.get("rank"), "identification_margin": judged.get("margin"),
                     "firm": judged.get("firm"), "possible": judged.get("possible"),
                     "risk_band": psnr_band(float(p[i]), float(floor[i]))})
    paper_band = risk_band(float(p.double().mean()))
    measured = measured_band(p, floor, ident, seed)
    return {
        "per_image": rows,
        "summary": {"psnr": _stats(p, seed), "ssim": _stats(s, seed), "lpips": _stats(lp, seed)},
        # FedLeak's protocol (repeats allowed), for comparison with the paper's tables only; the risk
        # band and --fail-on use the one-to-one numbers above.
        "paper_best_match": _best_match_summary(recon, truth),
        # What a constant image scores here: a mean PSNR at or below it shows nothing the metric can see.
        "blank_baseline": blank,
        # mean over images of PSNR minus that image's own floor (the best of the null references on it,
        # fedaudit/metrics/blank.py): the floor the band reads
        "psnr_above_blank": measured["psnr"]["above_floor"],
        "identification": ident,
        # FedLeak's band of the mean PSNR as the paper reads it (no floor, no interval), for its tables only
        "risk_band_psnr": paper_band,
        "risk_band": measured["band"],
        "risk_band_range": measured["range"],
        "band": measured,
        # the riskiest single image by PSNR, each against its own floor and margin (as the batch's PSNR band)
        "worst_image_risk_band": max((row["risk_band"] for row in rows), key=BANDS.index, default="low"),
        "conventions": {
            "psnr": "per image on [0,1] (data range 1), then averaged; MSE floored at 1e-10 (100 dB)",
            "ssim": ssim_mod.SETTINGS,
            "lpips": lp_model.info(),
            "matching": MATCHING_METHOD,
            "paper_best_match": BEST_MATCH_METHOD,
            "blank_baseline": BLANK_METHOD,
            "risk_bands": RISK_SOURCE + f"; counted only {MARGIN_DB:g} dB above the floor of null references; the "
                          "band is the worse of that and the identification band (identified >= 25% medium, >= 50% high, >= 75% very high) where "
                          "beyond chance of its nulls (docs/metrics.md, The measured band)",
            "band": BAND_METHOD,
            "identification": IDENT_METHOD,
        },
    }
