"""The model registry: names -> factories, and how a checkpoint's ``fedaudit.arch`` is resolved."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from fedaudit.errors import InputError
from fedaudit.registry import Registry


@dataclass(frozen=True)
class ModelEntry:
    """A registered architecture: ``factory(num_classes, input_shape, **kwargs) -> nn.Module`` (random init).
    ``pretrained(model) -> source`` loads published initial weights (``init-checkpoint`` uses it unless
    ``--random-weights``); ``mean``/``std`` are the input normalisation those weights expect."""

    name: str
    factory: Callable[..., nn.Module]
    description: str
    default_input_shape: tuple[int, int, int] = (3, 32, 32)
    paper: str = ""
    pretrained: Callable[[nn.Module], str] | None = None
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)


MODELS: Registry[ModelEntry] = Registry("model")


def register_model(name: str, description: str, default_input_shape=(3, 32, 32), paper: str = "", **extra):
    """Decorator for a factory ``f(num_classes, input_shape, **kwargs)``; ``extra``: ``pretrained``, ``mean``, ``std``."""

    def deco(factory):
        MODELS.add(name, ModelEntry(name, factory, description, tuple(default_input_shape), paper, **extra))
        return factory

    return deco


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to rebuild the network a checkpoint belongs to (no pickled module)."""

    arch: str
    num_classes: int
    input_shape: tuple[int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        c = self.input_shape[0]
        if len(self.input_shape) != 3 or min(self.input_shape) < 1:
            raise InputError(f"input_shape must be [C,H,W] with positive entries, got {list(self.input_shape)}")
        if self.num_classes < 2:
            raise InputError(f"num_classes must be >= 2, got {self.num_classes}")
        for nm, v in (("mean", self.mean), ("std", self.std)):
            if len(v) not in (1, c):
                raise InputError(f"{nm} has {len(v)} entries; the input has {c} channels")
        if any(s <= 0 for s in self.std):
            raise InputError("std entries must be > 0")


def final_linear(model: nn.Module) -> str | None:
    """Name of the output layer: the last ``nn.Linear`` in module order (``fc``, ``classifier.6``...)."""
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    return last


def flat_features(body: nn.Module, input_shape) -> int:
    """Size of ``body``'s flattened output for one input of ``input_shape`` (a dry forward)."""
    with torch.no_grad():
        return int(body(torch.zeros(1, *input_shape)).flatten(1).shape[1])
