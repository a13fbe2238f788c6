"""The forward a server would run: images in [0,1] are normalised inside, as the client's pipeline did."""

from __future__ import annotations

import functools

import torch

from fedaudit.models.registry import ModelSpec


@functools.lru_cache(maxsize=64)
def _constant(values: tuple[float, ...], channels: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The [1, C, 1, 1] tensor of ``values``, made once per dtype and device: a CUDA graph's capture may not copy
    from the host, and an attack's iteration normalises every time (fedaudit/attacks/cuda_graph.py)."""
    with torch.inference_mode(False):  # a normal tensor even if first made under inference mode (autograd saves it)
        return torch.tensor(values, dtype=dtype, device=device).expand(channels).reshape(1, channels, 1, 1)


def _per_channel(values, channels: int, like: torch.Tensor) -> torch.Tensor:
    return _constant(tuple(float(v) for v in values), channels, like.dtype, like.device)


def normalize(x01: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """``(x - mean) / std`` per channel; differentiable, so attacks optimise images in [0,1]."""
    c = spec.input_shape[0]
    return (x01 - _per_channel(spec.mean, c, x01)) / _per_channel(spec.std, c, x01)


def pixel_box(spec: ModelSpec, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The [0, 1] pixel range in the network's input space, [1, C, 1, 1] each (lower, upper), computed on the host
    and moved to ``device``: what attacks that optimise normalised inputs clamp them to."""
    c = spec.input_shape[0]
    lo, hi = (normalize(torch.full((1, c, 1, 1), v, device="cpu"), spec).to(device) for v in (0.0, 1.0))
    return lo, hi


def denormalize(x: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """Inverse of ``normalize``: the network's input back to [0,1] pixels (analytic reconstructions)."""
    c = spec.input_shape[0]
    return x * _per_channel(spec.std, c, x) + _per_channel(spec.mean, c, x)
