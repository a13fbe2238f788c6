"""The checkpoint file: the round's global ``state_dict`` plus how to rebuild the network.

Metadata: ``fedaudit.arch`` (registry name or ``module:factory``), ``fedaudit.arch_kwargs`` (JSON),
``fedaudit.num_classes``, ``fedaudit.input_shape`` ([C,H,W]), ``fedaudit.mean``/``fedaudit.std``
(normalisation in [0,1] pixel space, applied inside the forward).
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch import nn

from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors, sha256_file, write_safetensors
from fedaudit.io.hf_folder import is_text_checkpoint
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
    check_normalisation(spec, f"checkpoint {str(path)!r} (not written)")  # the reader's rules (sizes: checked earlier)
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


def state_differences(expected: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor]) -> dict[str, list[str]]:
    """The names ``state`` lacks, the names it has beyond ``expected`` and those whose shapes differ (each in its
    dict's order): what keeps a state from loading (here) and what a scan reports (fedaudit/scan/)."""
    return {"missing": [k for k in expected if k not in state],
            "unexpected": [k for k in state if k not in expected],
            "misshapen": [k for k, v in expected.items() if k in state and tuple(state[k].shape) != tuple(v.shape)]}


def load_state_strict(model: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Load ``state`` into ``model``; every missing, extra or mis-shaped tensor is an InputError."""
    expected = model.state_dict()
    diff = state_differences(expected, state)
    missing, extra = diff["missing"], diff["unexpected"]
    if missing:
        raise InputError(f"{source}: missing tensor {missing[0]!r}" + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""))
    if extra:
        raise InputError(f"{source}: tensor {extra[0]!r} is not in the architecture" + (f" (+{len(extra) - 1} more)" if len(extra) > 1 else ""))
    for k, ref in expected.items():
        if tuple(state[k].shape) != tuple(ref.shape):
            raise InputError(f"{source}: tensor {k!r} has shape {list(state[k].shape)}, the architecture expects {list(ref.shape)}")
        if state[k].is_floating_point() and not torch.isfinite(state[k]).all():
            raise InputError(f"{source}: tensor {k!r} contains NaN or Inf")
    loaded = OrderedDict((k, state[k].to(ref.dtype)) for k, ref in expected.items())
    # the architecture's own per-module state versions: safetensors keeps no ``_metadata``, and modules that check
    # theirs (torchvision's MNASNet) refused a state without it ("version should be set to 1 or 2", issue 87)
    loaded._metadata = getattr(expected, "_metadata", None)  # type: ignore[attr-defined]
    model.load_state_dict(loaded)


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


MAX_SIDE, MAX_CHANNELS, MAX_CLASSES = 8192, 64, 1_000_000


def _memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_normalisation(spec: ModelSpec, source: str) -> None:
    """The training data's per-channel mean and std: finite, std > 0, one value or one per input channel."""
    c = spec.input_shape[0]
    for name, values in (("mean", spec.mean), ("std", spec.std)):
        if len(values) not in (1, c):
            raise InputError(f"{source}: {name} has {len(values)} values for {c} input channels (give 1 or {c})")
        if not all(math.isfinite(v) for v in values):
            raise InputError(f"{source}: {name} {list(values)} is not finite")
    if min(spec.std) <= 0:
        raise InputError(f"{source}: std {list(spec.std)} must be > 0")


def check_spec(spec: ModelSpec, source: str, allow_custom: bool = False) -> None:
    """Everything a checkpoint's metadata must satisfy, checked the same way when one is read and before one is
    built or written (``init-checkpoint``), so fedaudit never writes a checkpoint it would refuse."""
    check_normalisation(spec, source)
    check_sizes(spec, source, allow_custom)


def check_sizes(spec: ModelSpec, source: str, allow_custom: bool = False) -> None:
    """Refuse sizes no machine could hold before anything is allocated: an input side above 8,192 pixels, more
    than 64 channels or 1,000,000 classes, or a model whose parameters (counted on PyTorch's meta device, which
    allocates nothing) need more memory than this machine has."""
    c, h, w = spec.input_shape
    if min(c, h, w) < 1 or c > MAX_CHANNELS or max(h, w) > MAX_SIDE:
        raise InputError(f"{source}: input shape {[c, h, w]} is not plausible (channels 1-{MAX_CHANNELS}, "
                         f"sides 1-{MAX_SIDE} pixels)")
    if spec.num_classes > MAX_CLASSES:
        raise InputError(f"{source}: num_classes {spec.num_classes} is above {MAX_CLASSES:,}")
    try:
        with torch.device("meta"):
            probe = build_model(spec, allow_custom=allow_custom)
        need = sum(p.numel() * p.element_size() for p in probe.parameters())
    except Exception:  # noqa: BLE001 - an architecture that cannot be built on the meta device is built for real
        return
    have = _memory_bytes()
    if have is not None and need > have:
        raise InputError(f"{source}: {spec.arch} with this metadata has {need / 2**30:.1f} GiB of parameters, more "
                         f"than this machine's {have / 2**30:.1f} GiB of memory")


def load_checkpoint(path: str | Path, allow_custom_arch: bool = False) -> Checkpoint:
    if is_text_checkpoint(path):
        raise InputError(f"{str(path)!r} is a language-model folder: image commands do not read it (text attacks: "
                         "'fedaudit reconstruct dager'; docs/text.md)")
    tensors, raw = read_safetensors(path, "checkpoint")
    source = f"checkpoint {str(path)!r}"
    meta = Meta(raw, source)
    if meta.str("file") == "update":
        raise InputError(f"{source} is a recorded update, not a checkpoint (arguments swapped?)")
    if tensors and not any(k.startswith("fedaudit.") for k in raw):  # a plain state_dict: say how to bring it in
        raise InputError(f"{source} has no fedaudit metadata (a plain state_dict?): import it with 'fedaudit import "
                         f"checkpoint {str(path)} --arch NAME -o checkpoint.safetensors' (docs/usage.md)")
    spec = read_spec(meta)
    check_spec(spec, source, allow_custom_arch)
    model = build_model(spec, allow_custom=allow_custom_arch)
    load_state_strict(model, tensors, source)
    check_forward(model, spec, source)
    return Checkpoint(Path(path), sha256_file(path), spec, model)
