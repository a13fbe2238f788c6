"""``fedaudit lpips-export``: save the LPIPS model (backbone + heads) for machines without the weights."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedaudit.cli.console import emit_json, refuse_existing
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import ForceOpt, LpipsNet
from fedaudit.errors import InputError


def register(app) -> None:
    @app.command("lpips-export")
    @handle_errors
    def lpips_export(
        output: Annotated[Path, typer.Option("--output", "-o", help="File to write (.safetensors).", show_default=False)],
        net: Annotated[LpipsNet, typer.Option("--net", help="LPIPS backbone to export (vgg is the meaningful one at 32x32).")] = LpipsNet.vgg,
        force: ForceOpt = False,
    ) -> None:
        """Write the LPIPS model with its real backbone to one file (use it with --lpips-weights)."""
        from fedaudit.metrics.lpips import export_lpips, load_lpips

        refuse_existing(output, force)
        lp = load_lpips(net.value)
        if lp.model is None:
            raise InputError(f"LPIPS {net.value} unavailable: {lp.reason}")
        export_lpips(lp, output)
        emit_json({"lpips_weights": str(output), "net": net.value, "source": lp.source})
