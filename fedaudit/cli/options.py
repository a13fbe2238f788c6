"""Annotated option aliases shared by commands, so every command spells them the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

CheckpointArg = Annotated[Path, typer.Argument(help="Global checkpoint (.safetensors with fedaudit.* metadata).", show_default=False)]
UpdateArg = Annotated[Path, typer.Argument(help="Recorded client update (.safetensors).", show_default=False)]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the JSON result here (atomically) instead of stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No tables or progress on stderr (errors still print).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace an existing output.")]
AllowCustomArchOpt = Annotated[bool, typer.Option("--allow-custom-arch", help="Allow a checkpoint whose fedaudit.arch is module:factory (imports and runs that code).")]
IgnoreBaseOpt = Annotated[bool, typer.Option("--ignore-base-mismatch", help="Audit even if the update names a different base checkpoint hash.")]
DeviceOpt = Annotated[str, typer.Option("--device", envvar="FEDAUDIT_DEVICE", help="auto | cpu | cuda | cuda:N")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (runs are repeatable on CPU).")]
