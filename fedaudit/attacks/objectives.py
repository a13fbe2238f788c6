"""Gradient distances shared by the attacks (each a function of lists of per-tensor gradients)."""

from __future__ import annotations

import torch


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def cosine_distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    """1 - cos over all tensors as one vector (Inverting Gradients)."""
    va, vb = flat(a), flat(b)
    return 1 - (va * vb).sum() / (va.norm() * vb.norm()).clamp_min(1e-30)


def l2_distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    """Sum of squared differences over all tensors (DLG)."""
    return sum(((x - y) ** 2).sum() for x, y in zip(a, b))
