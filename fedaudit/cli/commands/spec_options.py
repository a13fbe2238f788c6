"""Options that describe a model (for commands that create checkpoints) and their parsing."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from fedaudit.errors import InputError
from fedaudit.models import ModelSpec

NumClassesOpt = Annotated[int, typer.Option("--num-classes", help="Output classes.")]
InputShapeOpt = Annotated[str, typer.Option("--input-shape", help="C,H,W of one input.")]
MeanOpt = Annotated[str, typer.Option("--mean", help="Normalisation mean in [0,1] pixel space: one value or one per channel, comma-separated.")]
StdOpt = Annotated[str, typer.Option("--std", help="Normalisation std, like --mean.")]
ArchKwargsOpt = Annotated[Optional[str], typer.Option("--arch-kwargs", help='JSON object of architecture options, e.g. \'{"width": 16}\'.')]


def _numbers(text: str, what: str, cast=float):
    try:
        return tuple(cast(v) for v in text.replace(" ", "").split(",") if v != "")
    except ValueError:
        raise InputError(f"{what} must be comma-separated numbers, got {text!r}") from None


def make_spec(arch: str, num_classes: int, input_shape: str, mean: str, std: str, arch_kwargs: str | None) -> ModelSpec:
    try:
        kwargs = json.loads(arch_kwargs) if arch_kwargs else {}
    except json.JSONDecodeError as exc:
        raise InputError(f"--arch-kwargs is not valid JSON: {exc.msg}") from None
    if not isinstance(kwargs, dict):
        raise InputError("--arch-kwargs must be a JSON object")
    shape = _numbers(input_shape, "--input-shape", int)
    if len(shape) != 3:
        raise InputError(f"--input-shape must be C,H,W, got {input_shape!r}")
    return ModelSpec(arch, num_classes, shape, _numbers(mean, "--mean"), _numbers(std, "--std"), kwargs)
