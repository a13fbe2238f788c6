"""One-to-one matching of reconstructions to ground truth (Hungarian, scipy.optimize.linear_sum_assignment).

Attacks return images in arbitrary order. The cost is per-pair MSE (equivalently, maximum total PSNR
order); with more reconstructions than truth images (e.g. FedLeak's B*K batch) each truth image gets the
best distinct reconstruction.
"""

from __future__ import annotations

import torch
from scipy.optimize import linear_sum_assignment

METHOD = "hungarian (scipy.optimize.linear_sum_assignment) on per-pair MSE"


def match(recon: torch.Tensor, truth: torch.Tensor) -> list[tuple[int, int]]:
    """Pairs (truth_index, recon_index), sorted by truth index."""
    if recon.shape[1:] != truth.shape[1:]:
        raise ValueError(f"reconstructions {list(recon.shape[1:])} and truth {list(truth.shape[1:])} differ in shape")
    a = truth.clamp(0, 1).flatten(1).double()
    b = recon.clamp(0, 1).flatten(1).double()
    cost = torch.cdist(a, b).pow(2) / a.shape[1]
    rows, cols = linear_sum_assignment(cost.cpu().numpy())
    return sorted(zip(rows.tolist(), cols.tolist()))
