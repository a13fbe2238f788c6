"""The forward a server would run: images in [0,1] are normalised inside, as the client's pipeline did."""

from __future__ import annotations

import torch

from fedaudit.models.registry import ModelSpec


def _per_channel(values, channels: int, like: torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(values, dtype=like.dtype, device=like.device)
    return t.expand(channels).reshape(1, channels, 1, 1)


def normalize(x01: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """``(x - mean) / std`` per channel; differentiable, so attacks optimise images in [0,1]."""
    c = spec.input_shape[0]
    return (x01 - _per_channel(spec.mean, c, x01)) / _per_channel(spec.std, c, x01)


def denormalize(x: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """Inverse of ``normalize``: the network's input back to [0,1] pixels (analytic reconstructions)."""
    c = spec.input_shape[0]
    return x * _per_channel(spec.std, c, x) + _per_channel(spec.mean, c, x)
