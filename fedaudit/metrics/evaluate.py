"""Score reconstructions against ground truth: match one-to-one, then PSNR/SSIM/LPIPS and the risk band."""

from __future__ import annotations

from typing import Any

import torch

from fedaudit.metrics import ssim as ssim_mod
from fedaudit.metrics.blank import METHOD as BLANK_METHOD
from fedaudit.metrics.blank import blank_baseline
from fedaudit.metrics.identification import METHOD as IDENT_METHOD
from fedaudit.metrics.identification import identify, judge_net
from fedaudit.metrics.lpips import load_lpips, lpips_distance
from fedaudit.metrics.matching import BEST_MATCH_METHOD, best_match, match
from fedaudit.metrics.matching import METHOD as MATCHING_METHOD
from fedaudit.metrics.psnr import psnr
from fedaudit.metrics.risk import SOURCE as RISK_SOURCE
from fedaudit.metrics.risk import risk_band, worst_band


def _stats(values: torch.Tensor | None) -> dict[str, float] | None:
    if values is None or values.numel() == 0:
        return None
    v = values.double()
    return {"mean": float(v.mean()), "std": float(v.std(unbiased=False)), "min": float(v.min()), "max": float(v.max())}


def _best_match_summary(recon: torch.Tensor, truth: torch.Tensor) -> dict[str, Any]:
    pairs = best_match(recon, truth)
    a = recon[torch.tensor([r for _, r in pairs])].float().cpu()
    b = truth[torch.tensor([t for t, _ in pairs])].float().cpu()
    return {"psnr": _stats(psnr(a, b)), "ssim": _stats(ssim_mod.ssim(a, b)),
            "distinct_reconstructions": len({r for _, r in pairs})}


def evaluate_images(recon: torch.Tensor, truth: torch.Tensor, lpips_net: str = "vgg",
                    lpips_weights: str | None = None, attacked_arch: str | None = None) -> dict[str, Any]:
    """Per-image and summary metrics. The risk band is the worse of the PSNR band (mean PSNR over the matched
    truth images) and the identification band (fedaudit/metrics/identification.py)."""
    pairs = match(recon, truth)
    t_idx = torch.tensor([t for t, _ in pairs])
    r_idx = torch.tensor([r for _, r in pairs])
    a, b = recon[r_idx].float().cpu(), truth[t_idx].float().cpu()
    p, s = psnr(a, b), ssim_mod.ssim(a, b)
    lp_model = load_lpips(lpips_net, lpips_weights)
    lp = lpips_distance(lp_model, a, b)
    blank = blank_baseline(truth)
    judge = judge_net(attacked_arch, lpips_net)
    ident = identify(recon, truth, pairs, judge, lpips_weights if judge == lpips_net else None)
    found = {row["recon_index"]: row["identified"] for row in ident.get("per_image", [])}
    rows = [
        {"truth_index": int(t), "recon_index": int(r), "psnr": float(p[i]), "ssim": float(s[i]),
         "lpips": None if lp is None else float(lp[i]), "identified": found.get(int(r)),
         "risk_band": risk_band(float(p[i]))}
        for i, (t, r) in enumerate(pairs)
    ]
    psnr_band = risk_band(float(p.double().mean()))
    return {
        "per_image": rows,
        "summary": {"psnr": _stats(p), "ssim": _stats(s), "lpips": _stats(lp)},
        # FedLeak's protocol (repeats allowed), for comparison with the paper's tables only; the risk
        # band and --fail-on use the one-to-one numbers above.
        "paper_best_match": _best_match_summary(recon, truth),
        # What a constant image scores here: a mean PSNR at or below it shows nothing the metric can see.
        "blank_baseline": blank,
        "psnr_above_blank": float(p.double().mean()) - blank["floor"]["psnr"],
        "identification": ident,
        "risk_band_psnr": psnr_band,
        "risk_band": worst_band([psnr_band, ident.get("band")]) or psnr_band,
        "worst_image_risk_band": risk_band(float(p.max())),
        "conventions": {
            "psnr": "per image on [0,1] (data range 1), then averaged; MSE floored at 1e-10 (100 dB)",
            "ssim": ssim_mod.SETTINGS,
            "lpips": lp_model.info(),
            "matching": MATCHING_METHOD,
            "paper_best_match": BEST_MATCH_METHOD,
            "blank_baseline": BLANK_METHOD,
            "risk_bands": RISK_SOURCE + "; the band is the worse of that and the identification band "
                          "(identified >= 25% medium, >= 50% high, >= 75% very high)",
            "identification": IDENT_METHOD,
        },
    }
