"""How a checkpoint's ``fedaudit.arch`` becomes a network: a registered name, any ``torchvision.<name>`` classifier,
or ``module:factory`` (a user's own code, imported only with ``--allow-custom-arch``)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Callable

from torch import nn

from fedaudit.errors import InputError
from fedaudit.models.registry import MODELS, ModelEntry, ModelSpec
from fedaudit.models.torchvision_models import torchvision_entry


def is_custom_arch(arch: str) -> bool:
    """``module:factory`` names a user's own code; importing it runs that code."""
    return ":" in arch


def _custom_factory(arch: str) -> Callable[..., nn.Module]:
    """The factory ``module:factory`` names: ``path/to/file.py:make`` loads that file; a module name is looked up on
    Python's path with the current folder first (the ``fedaudit`` script's own path does not hold it, so a module
    beside the user's files was "not found"). Only with --allow-custom-arch (build_model)."""
    module_name, _, attr = arch.rpartition(":")
    if not module_name or not attr:
        raise InputError(f"custom architecture must look like 'module:factory' or 'path/to/file.py:factory', got {arch!r}")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise InputError(f"architecture {arch!r}: {module_name!r} is not a file")
            spec = importlib.util.spec_from_file_location(f"fedaudit_custom_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise InputError(f"architecture {arch!r}: cannot load {module_name!r} as Python")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            sys.path.insert(0, os.getcwd())
            try:
                module = importlib.import_module(module_name)
            finally:
                sys.path.remove(os.getcwd())
    except ImportError as exc:
        raise InputError(f"cannot import module {module_name!r} for architecture {arch!r} (looked in the current "
                         f"folder and on Python's path; or give 'path/to/file.py:{attr}'): {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InputError(f"{module_name!r} has no callable {attr!r}")
    return factory


def model_entry(arch: str) -> ModelEntry:
    """The registered entry for ``arch``; any ``torchvision.<name>`` classification model also resolves."""
    if arch not in MODELS and arch.startswith("torchvision."):
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


def initial_model(spec: ModelSpec, pretrained: bool = True, allow_custom: bool = False) -> tuple[nn.Module, str]:
    """A new network for ``spec`` with its published initial weights when the architecture has them (and
    ``pretrained``), else at random init (seed torch first); returns it and where its weights came from."""
    model = build_model(spec, allow_custom=allow_custom)
    entry = None if is_custom_arch(spec.arch) else model_entry(spec.arch)
    if not pretrained or entry is None or entry.pretrained is None:
        return model, "random init"
    try:
        return model, entry.pretrained(model)
    except ValueError as exc:
        raise InputError(f"cannot load the initial weights of {spec.arch!r}: {exc}") from None
