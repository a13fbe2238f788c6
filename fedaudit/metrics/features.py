"""How well recovered output-layer inputs match the true ones (RGLA's feature stage); only metrics read the truth.

Recovered and true features are paired one to one by the Hungarian algorithm on L2 distance, within label groups
when both label lists are given (samples sharing a label are interchangeable in RGLA's equations).
"""

from __future__ import annotations

import torch
from scipy.optimize import linear_sum_assignment

FORBIDDEN = 1e30


def feature_recovery(recovered: torch.Tensor, true: torch.Tensor, rec_labels: list[int] | None = None,
                     true_labels: list[int] | None = None) -> dict:
    a, b = recovered.detach().double().cpu().flatten(1), true.detach().double().cpu().flatten(1)
    cost = torch.cdist(b, a)
    if rec_labels is not None and true_labels is not None:
        same = torch.tensor(true_labels, device="cpu").view(-1, 1) == torch.tensor(rec_labels, device="cpu").view(1, -1)
        cost = torch.where(same, cost, torch.full_like(cost, FORBIDDEN))
    rows, cols = linear_sum_assignment(cost.numpy())
    rel = [(a[c] - b[r]).norm() / b[r].norm().clamp_min(1e-300) for r, c in zip(rows, cols)]
    cos = [torch.nn.functional.cosine_similarity(a[c], b[r], dim=0) for r, c in zip(rows, cols)]
    rel_t, cos_t = torch.stack(rel), torch.stack(cos)
    return {
        "pairs": [[int(r), int(c)] for r, c in zip(rows, cols)],
        "relative_error": {"mean": float(rel_t.mean()), "max": float(rel_t.max())},
        "cosine": {"mean": float(cos_t.mean()), "min": float(cos_t.min())},
        "per_sample_relative_error": [float(v) for v in rel_t],
        "matching": "Hungarian on L2 distance within label groups (truth index, recovered index)",
    }
