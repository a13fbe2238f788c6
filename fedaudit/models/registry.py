"""The model registry: names -> factories, and how a checkpoint's ``fedaudit.arch`` is resolved."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from fedaudit.errors import InputError
from fedaudit.registry import Registry


@dataclass(frozen=True)
class ModelEntry:
    """A registered architecture: ``factory(num_classes, input_shape, **kwargs) -> nn.Module``."""

    name: str
    factory: Callable[..., nn.Module]
    description: str
    default_input_shape: tuple[int, int, int] = (3, 32, 32)
    paper: str = ""


MODELS: Registry[ModelEntry] = Registry("model")


def register_model(name: str, description: str, default_input_shape=(3, 32, 32), paper: str = ""):
    """Decorator for a factory ``f(num_classes, input_shape, **kwargs)``."""

    def deco(factory):
        MODELS.add(name, ModelEntry(name, factory, description, tuple(default_input_shape), paper))
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


def is_custom_arch(arch: str) -> bool:
    """``module:factory`` names a user's own code; importing it runs that code."""
    return ":" in arch


def _custom_factory(arch: str) -> Callable[..., nn.Module]:
    module_name, _, attr = arch.partition(":")
    if not module_name or not attr:
        raise InputError(f"custom architecture must look like 'module:factory', got {arch!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"cannot import module {module_name!r} for architecture {arch!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InputError(f"{module_name!r} has no callable {attr!r}")
    return factory


def model_entry(arch: str) -> ModelEntry:
    """The registered entry for ``arch``; any ``torchvision.<name>`` classification model also resolves."""
    if arch not in MODELS and arch.startswith("torchvision."):
        from fedaudit.models.torchvision_models import torchvision_entry

        return torchvision_entry(arch)
    return MODELS.get(arch)


def build_model(spec: ModelSpec, allow_custom: bool = False) -> nn.Module:
    """Instantiate the architecture of ``spec`` (random init; load weights separately)."""
    if is_custom_arch(spec.arch):
        if not allow_custom:
            raise InputError(
                f"the checkpoint names custom code {spec.arch!r}; importing it runs that code: "
                "pass --allow-custom-arch if you trust it"
            )
        factory = _custom_factory(spec.arch)
        params = inspect.signature(factory).parameters
        extra = {"input_shape": tuple(spec.input_shape)} if "input_shape" in params else {}
        model_fn = lambda: factory(num_classes=spec.num_classes, **extra, **spec.kwargs)  # noqa: E731
    else:
        entry = model_entry(spec.arch)
        model_fn = lambda: entry.factory(spec.num_classes, tuple(spec.input_shape), **spec.kwargs)  # noqa: E731
    try:
        model = model_fn()
    except (TypeError, ValueError) as exc:
        raise InputError(f"cannot build {spec.arch!r} with options {spec.kwargs}: {exc}") from None
    if not isinstance(model, nn.Module):
        raise InputError(f"{spec.arch!r} did not return a torch.nn.Module")
    return model


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
