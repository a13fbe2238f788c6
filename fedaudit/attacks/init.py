"""Initial dummy images (in [0,1] pixel space)."""

from __future__ import annotations

import torch

from fedaudit.models.normalize import denormalize
from fedaudit.models.registry import ModelSpec


def normal_init(spec: ModelSpec, shape, gen: torch.Generator) -> torch.Tensor:
    """N(0,1) in the network's normalised input space (DLG, Inverting Gradients), mapped to pixels, clamped."""
    return denormalize(torch.randn(shape, generator=gen, device="cpu"), spec).clamp(0, 1)


def uniform_init(spec: ModelSpec, shape, gen: torch.Generator) -> torch.Tensor:
    """U[0,1] pixels (FedLeak)."""
    return torch.rand(shape, generator=gen, device="cpu")


INITS = {"normal": normal_init, "uniform": uniform_init}
