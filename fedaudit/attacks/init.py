"""Initial dummy images (in [0,1] pixel space)."""

from __future__ import annotations

import torch

from fedaudit.models.registry import ModelSpec


def normal_init(spec: ModelSpec, shape, gen: torch.Generator) -> torch.Tensor:
    """N(0,1) in the network's normalised input space (DLG, Inverting Gradients), mapped to pixels, clamped."""
    c = spec.input_shape[0]
    mean = torch.as_tensor(spec.mean, dtype=torch.float32, device="cpu").expand(c).view(1, c, 1, 1)
    std = torch.as_tensor(spec.std, dtype=torch.float32, device="cpu").expand(c).view(1, c, 1, 1)
    return (mean + std * torch.randn(shape, generator=gen, device="cpu")).clamp(0, 1)


def uniform_init(spec: ModelSpec, shape, gen: torch.Generator) -> torch.Tensor:
    """U[0,1] pixels (FedLeak)."""
    return torch.rand(shape, generator=gen, device="cpu")


INITS = {"normal": normal_init, "uniform": uniform_init}
