"""Gradient distances shared by the attacks (each a function of lists of per-tensor gradients)."""

from __future__ import annotations

import functools
import operator

import torch


def total(terms: list[torch.Tensor]) -> torch.Tensor:
    """The sum of scalar tensors, added left to right (what ``sum()`` does, typed)."""
    return functools.reduce(operator.add, terms)


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def cosine_distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    """1 - cos over all tensors as one vector (Inverting Gradients)."""
    va, vb = flat(a), flat(b)
    return 1 - (va * vb).sum() / (va.norm() * vb.norm()).clamp_min(1e-30)


def l2_distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    """Sum of squared differences over all tensors (DLG)."""
    return total([((x - y) ** 2).sum() for x, y in zip(a, b)])
