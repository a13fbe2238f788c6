"""SSIM as in Wang et al. 2004, computed by scikit-image.

Gaussian window 11x11 (sigma 1.5, truncated at 3.5 sigma), K1=0.01, K2=0.03, data range 1, population
covariance, mean over channels and over the valid (unpadded) part of the map. skimage's own defaults
(7x7 uniform, sample covariance) differ, so every setting is passed explicitly and recorded.
"""

from __future__ import annotations

import numpy as np
import torch
from skimage.metrics import structural_similarity

SETTINGS = {
    "implementation": "skimage.metrics.structural_similarity",
    "window": "gaussian 11x11, sigma=1.5",
    "K1": 0.01,
    "K2": 0.03,
    "data_range": 1.0,
    "covariance": "population",
    "border": "valid (border of 5 px cropped before averaging)",
}


def ssim(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-image SSIM [N] of two [N,C,H,W] batches in [0,1]."""
    if x.shape != y.shape:
        raise ValueError(f"ssim: shapes differ {list(x.shape)} vs {list(y.shape)}")
    if min(x.shape[-2:]) < 11:
        raise ValueError("ssim: images must be at least 11x11 for the 11x11 window")
    a = x.clamp(0, 1).double().cpu().numpy()
    b = y.clamp(0, 1).double().cpu().numpy()
    vals = [
        structural_similarity(ai, bi, data_range=1.0, channel_axis=0, gaussian_weights=True, sigma=1.5,
                              use_sample_covariance=False, K1=0.01, K2=0.03)
        for ai, bi in zip(a, b)
    ]
    return torch.tensor(np.array(vals, dtype=np.float64), dtype=torch.float32, device="cpu")
