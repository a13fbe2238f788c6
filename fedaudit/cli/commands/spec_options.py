"""Options that describe a model (for commands that create checkpoints) and their parsing."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from fedaudit.errors import InputError

if TYPE_CHECKING:
    from fedaudit.models import ModelSpec

NumClassesOpt = Annotated[int, typer.Option("--num-classes", help="Output classes.")]
InputShapeOpt = Annotated[Optional[str], typer.Option("--input-shape", help="C,H,W of one input (default: the architecture's, else 3,32,32).")]
MeanOpt = Annotated[Optional[str], typer.Option("--mean", help="Normalisation mean in [0,1] pixel space: one value or one per channel, "
                                                               "comma-separated (default: what the architecture's weights expect, else 0.5).")]
StdOpt = Annotated[Optional[str], typer.Option("--std", help="Normalisation std, like --mean.")]
ArchKwargsOpt = Annotated[Optional[str], typer.Option("--arch-kwargs", help='JSON object of architecture options, e.g. \'{"width": 16}\'.')]


def _numbers(text: str, what: str, cast=float):
    try:
        return tuple(cast(v) for v in text.replace(" ", "").split(",") if v != "")
    except ValueError:
        raise InputError(f"{what} must be comma-separated numbers, got {text!r}") from None


def make_spec(arch: str, num_classes: int, input_shape: str | None, mean: str | None, std: str | None,
              arch_kwargs: str | None) -> ModelSpec:
    """The spec from the flags; what they leave out comes from the registered architecture (or 3,32,32 / 0.5)."""
    from fedaudit.models import ModelSpec, is_custom_arch
    from fedaudit.models.build import model_entry

    try:
        kwargs = json.loads(arch_kwargs) if arch_kwargs else {}
    except json.JSONDecodeError as exc:
        raise InputError(f"--arch-kwargs is not valid JSON: {exc.msg}") from None
    if not isinstance(kwargs, dict):
        raise InputError("--arch-kwargs must be a JSON object")
    entry = None if is_custom_arch(arch) else model_entry(arch)
    shape = _numbers(input_shape, "--input-shape", int) if input_shape else (entry.default_input_shape if entry else (3, 32, 32))
    if len(shape) != 3:
        raise InputError(f"--input-shape must be C,H,W, got {input_shape!r}")
    mean_v = _numbers(mean, "--mean") if mean else (entry.mean if entry else (0.5,))
    std_v = _numbers(std, "--std") if std else (entry.std if entry else (0.5,))
    return ModelSpec(arch, num_classes, (shape[0], shape[1], shape[2]), mean_v, std_v, kwargs)
