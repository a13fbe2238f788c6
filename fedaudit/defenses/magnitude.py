"""Keep the largest-magnitude gradient entries and zero the rest (shared by ``prune`` and ``topk-sparsify``)."""

from __future__ import annotations

import torch

from fedaudit.defenses.base import flat, unflat


def _keep(v: torch.Tensor, keep: float) -> tuple[torch.Tensor, int]:
    k = int(round(keep * v.numel()))
    out = torch.zeros_like(v)
    if k > 0:
        idx = torch.topk(v.abs().reshape(-1), k, sorted=False).indices
        out.view(-1)[idx] = v.reshape(-1)[idx]
    return out, k


def keep_largest(grads: dict[str, torch.Tensor], keep: float, scope: str) -> tuple[dict[str, torch.Tensor], float]:
    """Zero all but round(keep * n) entries of largest |g|, per tensor or over all tensors; returns the result and
    the fraction of entries removed. Ties at the threshold are broken by position, so the counts are exact."""
    total = sum(v.numel() for v in grads.values())
    if scope == "global":
        v, kept = _keep(flat(grads), keep)
        return unflat(v, grads), 1 - kept / max(total, 1)
    out, kept = {}, 0
    for name, g in grads.items():
        out[name], k = _keep(g, keep)
        kept += k
    return out, 1 - kept / max(total, 1)
