"""Truth-free evidence about a reconstruction: how far it explains the update, and whether restarts agree.

* **Explained update.** The cosine gradient distance d(x) = 1 - cos(grad(x, labels), g_update), per matched tensor
  and averaged over tensors (whatever the attack optimised), for the result, for a blank image (the
  lower of all-black and mid-gray) and for uniform random images. ``relative_distance`` = d(result) / d(blank):
  near 0 the result explains the update; near 1 it explains it no better than a blank image (e.g. an update
  drowned in DP noise).
* **Restart agreement.** Independent restarts that converge to the same picture are likely the truth; restarts
  that end in different pictures show the update underdetermines the images. Every other restart's final images
  are matched one to one to the best restart's (Hungarian on MSE, fedaudit/metrics/matching.py) and scored by
  PSNR (and LPIPS when its backbone is present). Needs ``--restarts`` >= 2; absent otherwise.
* **Natural-image score.** Mean anisotropic total variation of the result (noise scores high), beside the same
  number for uniform noise, and the contrast (mean per-image pixel standard deviation; a blank image has 0).
* **Data prior.** The checkpoint's normalisation is the training data's per-channel mean and std: from it, the
  PSNR a blank image would score on such data (the blank floor, without the truth) and the PSNR the result would
  score were it unrelated to the data (``data_prior``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedaudit.attacks.base import total_variation
from fedaudit.attacks.engine import GradientEngine
from fedaudit.attacks.objectives import cosine_distance
from fedaudit.metrics.lpips import load_lpips, lpips_distance
from fedaudit.metrics.matching import match
from fedaudit.metrics.psnr import psnr

RANDOM_DRAWS = 3
PSNR_CAP = 60.0  # identical restarts score this (PSNR itself is capped at 100 dB by the 1e-10 MSE floor)


def gradient_distances(engine: GradientEngine, images: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """(IG's cosine distance over all tensors as one vector, the mean over tensors of each tensor's own cosine
    distance) of ``images`` (in [0,1]) with ``labels`` to the update, in float64, no graph kept. The per-tensor
    mean weighs every layer alike: on trained or PyTorch-initialised models the output layer dominates the joint
    vector and the joint distance of any image sits near 1e-6, at float32 precision."""
    x = images.detach().to(engine.device).float()
    g = [t.detach().double() for t in engine.gradient(x, labels.to(engine.device), create_graph=False)]
    target = [t.double() for t in engine.target.tensors]
    joint = float(cosine_distance(g, target))
    per = [float(1 - (a * b).sum() / (a.norm() * b.norm())) for a, b in zip(g, target)
           if float(a.norm()) > 0 and float(b.norm()) > 0]
    return joint, (sum(per) / len(per) if per else float("nan"))


def explained(engine: GradientEngine, images: torch.Tensor, labels: torch.Tensor, seed: int = 0) -> dict[str, Any]:
    """Gradient distances of the result, of a blank image and of random images, and their ratios
    (``relative_distance`` uses the per-tensor mean)."""
    d, d_layer = gradient_distances(engine, images, labels)
    blanks = {name: gradient_distances(engine, torch.full_like(images, v), labels) for name, v in (("black", 0.0), ("gray", 0.5))}
    gen = torch.Generator().manual_seed(seed)
    rand = [gradient_distances(engine, torch.rand(images.shape, generator=gen, device="cpu"), labels) for _ in range(RANDOM_DRAWS)]
    d_blank = min(v[1] for v in blanks.values())
    d_rand = sum(v[1] for v in rand) / len(rand)
    return {"distance": d, "layer_distance": d_layer, "blank_distance": d_blank,
            "blank_distances": {k: v[1] for k, v in blanks.items()}, "random_distance": d_rand,
            "relative_distance": d_layer / max(d_blank, 1e-12), "relative_to_random": d_layer / max(d_rand, 1e-12)}


def restart_agreement(best: torch.Tensor, others: list[torch.Tensor], lpips_model=None) -> dict[str, Any] | None:
    """One-to-one matched PSNR (and LPIPS) between the best restart's images and each other restart's; None
    with fewer than two restarts. ``psnr`` is the mean over the other restarts (capped at 60 dB: identical)."""
    others = [o for o in others if o.shape == best.shape]
    if not others:
        return None
    per: list[dict[str, Any]] = []
    a = best.float().cpu()
    for o in others:
        b = o.float().cpu()
        pairs = match(b, a)  # (index in a, index in b)
        aa, bb = a[[i for i, _ in pairs]], b[[j for _, j in pairs]]
        p = psnr(bb, aa).double().clamp(max=PSNR_CAP)
        row: dict[str, Any] = {"psnr": float(p.mean()), "psnr_min": float(p.min())}
        if lpips_model is not None and lpips_model.model is not None:
            lp = lpips_distance(lpips_model, bb, aa)
            row["lpips"] = None if lp is None else float(lp.mean())
        per.append(row)
    out: dict[str, Any] = {"restarts_compared": len(per) + 1, "psnr": sum(r["psnr"] for r in per) / len(per),
                           "psnr_min": min(r["psnr_min"] for r in per), "per_restart": per}
    lps = [r["lpips"] for r in per if r.get("lpips") is not None]
    out["lpips"] = sum(lps) / len(lps) if lps else None
    return out


def naturalness(images: torch.Tensor, seed: int = 0) -> dict[str, float]:
    """Total variation of the result per image (mean) beside that of uniform noise of the same shape."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.rand(images.shape, generator=gen, device="cpu")
    x = images.float().cpu()
    return {"tv": float(total_variation(x)), "tv_noise": float(total_variation(noise)),
            "contrast": float(x.flatten(1).std(1).mean())}


def data_prior(images: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> dict[str, float]:
    """What the checkpoint's normalisation (the training data's per-channel mean m and std s) says about PSNR
    without the truth: ``floor`` = the PSNR a blank image would score against such data (the better of black and
    mid-gray: MSE = s^2 + min(m^2, (m - 0.5)^2)), ``unrelated`` = the PSNR the result would score against such
    data were it independent of it (MSE = E(result - m)^2 + s^2). A reconstruction above ``unrelated`` shows
    more than chance agreement with the data's statistics."""
    x = images.double().cpu()
    c = x.shape[1]
    m = torch.tensor((list(mean) * c)[:c] if len(mean) == 1 else list(mean), dtype=torch.float64, device="cpu").view(1, -1, 1, 1)
    s = torch.tensor((list(std) * c)[:c] if len(std) == 1 else list(std), dtype=torch.float64, device="cpu").view(1, -1, 1, 1)
    floor_mse = float((s ** 2 + torch.minimum(m ** 2, (m - 0.5) ** 2)).mean())
    unrelated_mse = float(((x - m) ** 2 + s ** 2).mean())
    return {"floor": -10 * math.log10(floor_mse), "unrelated": -10 * math.log10(unrelated_mse)}


def reconstruction_evidence(engine: GradientEngine, images: torch.Tensor, labels: list[int],
                            restart_images: dict[int, torch.Tensor], best_restart: int, seed: int = 0,
                            lpips_net: str | None = None, lpips_weights: str | None = None) -> dict[str, Any]:
    """Everything above for one finished run (``images``: the best restart's, in [0,1])."""
    y = torch.as_tensor(labels, dtype=torch.long, device="cpu")
    if images.shape[0] != len(y):
        return {"reason": f"{images.shape[0]} images for {len(y)} labels: no gradient to compare"}
    others = [v for k, v in sorted(restart_images.items()) if k != best_restart]
    lp = load_lpips(lpips_net, lpips_weights) if lpips_net and others else None
    return {"num_images": int(images.shape[0]),
            "explained": explained(engine, images, y, seed),
            "restart_agreement": restart_agreement(images, others, lp),
            "naturalness": naturalness(images, seed),
            "data_prior": data_prior(images, engine.spec.mean, engine.spec.std)}
