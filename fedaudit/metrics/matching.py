"""Matching reconstructions to ground truth.

Attacks return images in arbitrary order, so every score needs a pairing. The primary one is one-to-one
(Hungarian, scipy.optimize.linear_sum_assignment) on per-pair MSE (equivalently, maximum total PSNR
order); with more reconstructions than truth images (e.g. FedLeak's B*K batch) each truth image gets the
best distinct reconstruction.

FedLeak's evaluation instead pairs "each image with the most similar reconstructed image" (Section 5),
which lets one reconstruction stand for several truth images. ``best_match`` gives that pairing so that
numbers can be set beside the paper's; it can only score higher than the one-to-one pairing.
"""

from __future__ import annotations

import torch
from scipy.optimize import linear_sum_assignment

METHOD = "hungarian (scipy.optimize.linear_sum_assignment) on per-pair MSE"
BEST_MATCH_METHOD = "per truth image, the reconstruction of least MSE (not one-to-one; FedLeak Section 5)"


def _cost(recon: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    if recon.shape[1:] != truth.shape[1:]:
        raise ValueError(f"reconstructions {list(recon.shape[1:])} and truth {list(truth.shape[1:])} differ in shape")
    a = truth.clamp(0, 1).flatten(1).double()
    b = recon.clamp(0, 1).flatten(1).double()
    return torch.cdist(a, b).pow(2) / a.shape[1]


def match(recon: torch.Tensor, truth: torch.Tensor) -> list[tuple[int, int]]:
    """Pairs (truth_index, recon_index), one-to-one, sorted by truth index."""
    rows, cols = linear_sum_assignment(_cost(recon, truth).cpu().numpy())
    return sorted(zip(rows.tolist(), cols.tolist()))


def best_match(recon: torch.Tensor, truth: torch.Tensor) -> list[tuple[int, int]]:
    """Pairs (truth_index, recon_index) with each truth image's closest reconstruction (repeats allowed)."""
    cols = _cost(recon, truth).argmin(dim=1)
    return [(t, int(r)) for t, r in enumerate(cols.tolist())]
