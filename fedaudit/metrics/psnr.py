"""PSNR per image on [0,1] (data range 1), then averaged: the convention of breaching and the papers.

Identical images have infinite PSNR; JSON has no infinity, so the MSE is floored at 1e-10 (100 dB cap).
"""

from __future__ import annotations

import torch

MSE_FLOOR = 1e-10  # -> at most 100 dB


def psnr(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-image PSNR [N] of two [N,C,H,W] batches, both clamped to [0,1]."""
    if x.shape != y.shape:
        raise ValueError(f"psnr: shapes differ {list(x.shape)} vs {list(y.shape)}")
    mse = (x.clamp(0, 1).double() - y.clamp(0, 1).double()).pow(2).flatten(1).mean(1)
    return (-10 * torch.log10(mse.clamp_min(MSE_FLOOR))).float()
