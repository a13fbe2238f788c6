"""The checkpoint file: the round's global ``state_dict`` plus how to rebuild the network.

Metadata: ``fedaudit.arch`` (registry name or ``module:factory``), ``fedaudit.arch_kwargs`` (JSON),
``fedaudit.num_classes``, ``fedaudit.input_shape`` ([C,H,W]), ``fedaudit.mean``/``fedaudit.std``
(normalisation in [0,1] pixel space, applied inside the forward).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch import nn

from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors, sha256_file, write_safetensors
from fedaudit.io.metadata import SCHEMA_VERSION, Meta, encode
from fedaudit.models import ModelSpec, build_model


@dataclass
class Checkpoint:
    path: Path
    sha256: str
    spec: ModelSpec
    model: nn.Module  # the architecture with the checkpoint's weights loaded, in eval mode, on CPU

    @classmethod
    def in_memory(cls, spec: ModelSpec, model: nn.Module) -> Checkpoint:
        """A checkpoint that was never written (benchmarks and tests build models in memory)."""
        return cls(Path("<memory>"), "", spec, model)


def spec_metadata(spec: ModelSpec) -> dict[str, str]:
    return encode(
        {
            "schema_version": SCHEMA_VERSION,
            "file": "checkpoint",
            "arch": spec.arch,
            "arch_kwargs": spec.kwargs or None,
            "num_classes": spec.num_classes,
            "input_shape": list(spec.input_shape),
            "mean": list(spec.mean),
            "std": list(spec.std),
        }
    )


def save_checkpoint(path: str | Path, model: nn.Module, spec: ModelSpec) -> Path:
    return write_safetensors(path, dict(model.state_dict()), spec_metadata(spec))


def read_spec(meta: Meta) -> ModelSpec:
    # required=True raises on a missing key, so none of these is None
    shape = cast(tuple[int, ...], meta.ints("input_shape", required=True))
    if len(shape) != 3:
        raise InputError(f"{meta.source}: metadata fedaudit.input_shape must be [C,H,W], got {list(shape)}")
    return ModelSpec(
        arch=cast(str, meta.str("arch", required=True)),
        num_classes=meta.int("num_classes", required=True, minimum=2),
        input_shape=(shape[0], shape[1], shape[2]),
        mean=cast(tuple[float, ...], meta.floats("mean", required=True)),
        std=cast(tuple[float, ...], meta.floats("std", required=True)),
        kwargs=meta.json("arch_kwargs", default={}, kind=dict),
    )


def load_state_strict(model: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Load ``state`` into ``model``; every missing, extra or mis-shaped tensor is an InputError."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    extra = [k for k in state if k not in expected]
    if missing:
        raise InputError(f"{source}: missing tensor {missing[0]!r}" + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""))
    if extra:
        raise InputError(f"{source}: tensor {extra[0]!r} is not in the architecture" + (f" (+{len(extra) - 1} more)" if len(extra) > 1 else ""))
    for k, ref in expected.items():
        if tuple(state[k].shape) != tuple(ref.shape):
            raise InputError(f"{source}: tensor {k!r} has shape {list(state[k].shape)}, the architecture expects {list(ref.shape)}")
        if state[k].is_floating_point() and not torch.isfinite(state[k]).all():
            raise InputError(f"{source}: tensor {k!r} contains NaN or Inf")
    model.load_state_dict({k: state[k].to(ref.dtype) for k, ref in expected.items()})


def check_forward(model: nn.Module, spec: ModelSpec, source: str) -> None:
    """One dry forward of a single input: catches input shapes the network cannot take."""
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros(1, *spec.input_shape))
    except RuntimeError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{source}: {spec.arch} cannot take input shape {list(spec.input_shape)}: {first}") from None
    if out.ndim != 2 or out.shape[1] != spec.num_classes:
        raise InputError(f"{source}: {spec.arch} outputs shape {list(out.shape)}, expected [N, {spec.num_classes}]")


def load_checkpoint(path: str | Path, allow_custom_arch: bool = False) -> Checkpoint:
    tensors, raw = read_safetensors(path, "checkpoint")
    source = f"checkpoint {str(path)!r}"
    meta = Meta(raw, source)
    if meta.str("file") == "update":
        raise InputError(f"{source} is a recorded update, not a checkpoint (arguments swapped?)")
    spec = read_spec(meta)
    model = build_model(spec, allow_custom=allow_custom_arch)
    load_state_strict(model, tensors, source)
    check_forward(model, spec, source)
    return Checkpoint(Path(path), sha256_file(path), spec, model)
