"""Annotated option aliases shared by commands, so every command spells them the same way."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer


class Kind(str, Enum):
    gradient = "gradient"
    delta = "delta"
    weights = "weights"


class Sign(str, Enum):
    local_minus_global = "local_minus_global"
    global_minus_local = "global_minus_local"


class Reduction(str, Enum):
    mean = "mean"
    sum = "sum"


class BNMode(str, Enum):
    train = "train"
    eval = "eval"


class FailOn(str, Enum):
    never = "never"
    medium = "medium"
    high = "high"
    very_high = "very_high"


class Gate(str, Enum):  # members upper-case: str already has .upper()/.lower()
    UPPER = "upper"
    POINT = "point"
    LOWER = "lower"


class TruthMismatch(str, Enum):
    error = "error"
    warn = "warn"


class ProgressMode(str, Enum):
    auto = "auto"
    bar = "bar"
    lines = "lines"
    off = "off"


class OutputFormat(str, Enum):
    json = "json"
    sarif = "sarif"


class LpipsNet(str, Enum):
    vgg = "vgg"
    alex = "alex"


CheckpointArg = Annotated[Path, typer.Argument(help=(
    "Global checkpoint (.safetensors with fedaudit.* metadata), or a Hugging Face language-model folder (config.json, "
    "model.safetensors, tokenizer.json) for text commands."), show_default=False)]
UpdateArg = Annotated[Path, typer.Argument(help="Recorded client update (.safetensors).", show_default=False)]
BaseOpt = Annotated[Optional[Path], typer.Option("--base", help=(
    "Text only: the base model's folder when the checkpoint is a LoRA adapter folder (default: the adapter's "
    "base_model_name_or_path, where that is a folder here)."), show_default=False)]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the JSON result here (atomically) instead of stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No tables or progress on stderr (errors still print).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace an existing output.")]
AllowCustomArchOpt = Annotated[bool, typer.Option("--allow-custom-arch", help="Allow a checkpoint whose fedaudit.arch is module:factory (imports and "
                                                                              "runs that code).")]
IgnoreBaseOpt = Annotated[bool, typer.Option("--ignore-base-mismatch", help="Audit even if the update names a different base checkpoint hash.")]
DeviceOpt = Annotated[str, typer.Option("--device", envvar="FEDAUDIT_DEVICE", help="auto (CUDA when present, else the CPU) | cpu | cuda | cuda:N")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (runs are repeatable on CPU).")]
FailOnOpt = Annotated[FailOn, typer.Option("--fail-on", help=(
    "Exit 1 when the risk band is at or above this: the band measured against --truth, else the band "
    "estimated from truth-free evidence, at the end of its range --gate picks (the report says which)."))]
GateOpt = Annotated[Gate, typer.Option("--gate", help=(
    "Which end of the band's range --fail-on tests: upper (default: a false alarm over a false 'safe'), point, or "
    "lower (only what is established)."))]
ProxiesOpt = Annotated[int, typer.Option("--proxies", envvar="FEDAUDIT_PROXIES", help=(
    "Calibrate the truth-free estimate on this many proxy batches: public images (--aux when given) captured with "
    "the update's recipe and attacked the same way; costs that many more attack runs. 0: the uncalibrated rule."))]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help=(
    "The stdout document: json (default) or sarif (SARIF 2.1.0, for a code-scanning page; docs/usage.md)."))]
LpipsNetOpt = Annotated[LpipsNet, typer.Option("--lpips-net", help="LPIPS backbone (vgg is the meaningful one at 32x32).")]
LpipsWeightsOpt = Annotated[Optional[Path], typer.Option("--lpips-weights", help="LPIPS model file from 'fedaudit lpips-export'.")]
TruthMismatchOpt = Annotated[TruthMismatch, typer.Option("--truth-mismatch", help=(
    "When --truth records another update's sha256: error (exit 2; a mismatched truth would measure 'low') or warn "
    "(measure anyway, the report says so)."))]
ProgressOpt = Annotated[ProgressMode, typer.Option("--progress", envvar="FEDAUDIT_PROGRESS", help=(
    "Progress on stderr: auto (a bar on a terminal, else a line every 30 s: CI logs, nohup), bar, lines or off."))]
