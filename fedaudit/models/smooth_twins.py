"""Smooth twins of activations PyTorch cannot differentiate twice, swapped in for the attack only.

Gradient matching differentiates the model's gradient again (second order). PyTorch (2.14) has no derivative of
``hardsigmoid_backward``, so MobileNetV3 and every model with a Hardsigmoid (its squeeze-excitation gates) ended in
"derivative for aten::hardsigmoid_backward is not implemented" (issue 87). Which layers need a twin is probed once
per process (``needs_twin``: a double backward on a few numbers), so a PyTorch that gains the derivative keeps the
real layer; on 2.14 Hardswish has it and only Hardsigmoid is swapped. Both are made of ReLU6's two kinks:

    hardsigmoid(x) = relu6(x + 3) / 6,    hardswish(x) = x * hardsigmoid(x)

and relu6(z) = softplus(z) - softplus(z - 6) in the limit, so the twins use softplus with sharpness ``BETA``:

    hardsigmoid~(x) = (softplus_b(x + 3) - softplus_b(x - 3)) / 6,    hardswish~(x) = x * hardsigmoid~(x)

smooth everywhere and within ``MAX_GAP`` of the originals (the largest gap is at the kinks x = -3 and x = 3:
ln 2 / (6 BETA) for hardsigmoid, 3 ln 2 / (6 BETA) for hardswish). The client's update was computed with the real
layers; the attack's model differs from it by this gap, and the report says which layers were swapped
(``smoothed``). ReLU6, Hardtanh and max-pool have second derivatives (zero almost everywhere) and stay.
"""

from __future__ import annotations

import copy
import functools
import math

import torch
from torch import nn
from torch.nn import functional as F

BETA = 8.0
MAX_GAP = {"Hardsigmoid": math.log(2) / (6 * BETA), "Hardswish": 3 * math.log(2) / (6 * BETA)}


def smooth_hardsigmoid(x: torch.Tensor) -> torch.Tensor:
    return (F.softplus(x + 3, beta=BETA) - F.softplus(x - 3, beta=BETA)) / 6


class SmoothHardsigmoid(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return smooth_hardsigmoid(x)


class SmoothHardswish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * smooth_hardsigmoid(x)


CANDIDATES: dict[type[nn.Module], type[nn.Module]] = {nn.Hardsigmoid: SmoothHardsigmoid,
                                                      nn.Hardswish: SmoothHardswish}


def needs_twin(layer: type[nn.Module]) -> bool:
    """Whether this PyTorch cannot differentiate ``layer`` twice (a double backward on a few numbers, once)."""
    return _needs_twin(layer.__name__)


@functools.cache
def _needs_twin(name: str) -> bool:
    layer = getattr(nn, name)
    x = torch.linspace(-4, 4, 9, requires_grad=True, device="cpu")
    (g,) = torch.autograd.grad(layer()(x).sum(), x, create_graph=True)
    try:
        torch.autograd.grad(g.sum(), x)
    except RuntimeError:
        return True
    return False


def twins() -> dict[type[nn.Module], type[nn.Module]]:
    return {layer: twin for layer, twin in CANDIDATES.items() if needs_twin(layer)}


def counts(model: nn.Module) -> dict[str, int]:
    """How many layers of each kind that needs a twin ``model`` has."""
    out: dict[str, int] = {}
    need = twins()
    for m in model.modules():
        if type(m) in need:
            out[type(m).__name__] = out.get(type(m).__name__, 0) + 1
    return out


def with_smooth_twins(model: nn.Module) -> tuple[nn.Module, dict[str, int]]:
    """``model`` itself when nothing needs a twin, else a copy with every such layer replaced, and the counts."""
    found = counts(model)
    if not found:
        return model, {}
    need = twins()
    twin = copy.deepcopy(model)
    for m in list(twin.modules()):
        for child_name, child in list(m.named_children()):
            if type(child) in need:
                setattr(m, child_name, need[type(child)]())
    return twin, found


def note(found: dict[str, int]) -> str:
    """The report's line on what the attack's model differs in."""
    layers = ", ".join(f"{n} {k}" for k, n in sorted(found.items()))
    gap = max(MAX_GAP[k] for k in found)
    return (f"the attack's model swaps {layers} layer(s) for smooth twins (PyTorch cannot differentiate them twice): "
            f"each differs from the original by at most {gap:.3f} (docs/models.md, 'Smooth twins')")
