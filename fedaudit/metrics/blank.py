"""The blank-image floor: how a constant image scores against the truth.

PSNR rewards closeness in mean intensity, so a blank image already scores well above 0 dB: about 12.5 dB
(SSIM 0.10) for mid-gray on a batch of 16 CIFAR-10 images, and 11.4 dB (SSIM 0.22) for all-black on MNIST
digits. A reconstruction that does not clear this floor shows nothing the metric can see, whatever its
number; the report states the floor beside the scores so a reviewer can tell the two apart.
"""

from __future__ import annotations

from typing import Any

import torch

from fedaudit.metrics import ssim as ssim_mod
from fedaudit.metrics.psnr import psnr

BLANKS = {"black": 0.0, "gray": 0.5}
METHOD = "mean PSNR/SSIM of a constant image (black = 0, gray = 0.5) against every truth image; 'floor' is the higher"


def blank_psnr_per_image(truth: torch.Tensor) -> torch.Tensor:
    """Per image, the higher PSNR of a constant image (black, mid-gray) against it: that image's own blank floor (the
    measured band reads PSNR against it, fedaudit/metrics/band.py)."""
    truth = truth.float().cpu()
    return torch.stack([psnr(torch.full_like(truth, v), truth) for v in BLANKS.values()]).max(0).values


def blank_baseline(truth: torch.Tensor) -> dict[str, Any]:
    """Mean PSNR and SSIM of each constant image against ``truth`` [N,C,H,W] in [0,1], and the higher PSNR."""
    truth = truth.float().cpu()
    out: dict[str, Any] = {}
    for name, value in BLANKS.items():
        blank = torch.full_like(truth, value)
        out[name] = {"psnr": float(psnr(blank, truth).double().mean()),
                     "ssim": float(ssim_mod.ssim(blank, truth).double().mean())}
    floor = max(BLANKS, key=lambda n: out[n]["psnr"])
    out["floor"] = {"image": floor, "psnr": out[floor]["psnr"], "ssim": out[floor]["ssim"]}
    return out
