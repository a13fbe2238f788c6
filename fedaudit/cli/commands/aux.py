"""``fedaudit aux export NAME -o FILE``: a built-in public image set as a safetensors file, for other tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from fedaudit.cli.console import emit_json, info_line, refuse_existing
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import ForceOpt, QuietOpt

OWN_SHAPE = {"cifar10": (3, 32, 32), "cifar100": (3, 32, 32), "imagenet": (3, 224, 224), "digits": (1, 28, 28)}


def register(app) -> None:
    group = typer.Typer(no_args_is_help=True, help="Built-in public image sets (--aux builtin:NAME).")

    @group.command("export")
    @handle_errors
    def export(
        name: Annotated[str, typer.Argument(help="cifar10 | cifar100 | imagenet | digits", show_default=False)],
        output: Annotated[Path, typer.Option("--output", "-o", help="The .safetensors to write ('images', 'labels').",
                                             show_default=False)],
        input_shape: Annotated[Optional[str], typer.Option("--input-shape", help="C,H,W to resize to (default: the "
                                                                                 "set's own).")] = None,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Write a built-in image set with its labels (what --aux builtin:NAME gives a command)."""
        from fedaudit.data.public import builtin
        from fedaudit.errors import InputError
        from fedaudit.io.files import write_safetensors

        refuse_existing(output, force)
        shape: tuple[int, ...] = OWN_SHAPE.get(name, (3, 32, 32))  # an unknown name: refused by builtin() below
        if input_shape:
            try:
                shape = tuple(int(v) for v in input_shape.split(","))
            except ValueError:
                raise InputError(f"--input-shape must be C,H,W integers, got {input_shape!r}") from None
        images, labels = builtin(name, shape)
        write_safetensors(output, {"images": images, "labels": labels}, {"fedaudit.file": "aux", "fedaudit.source": name})
        info_line(f"wrote {len(labels)} {name} images ({'x'.join(map(str, images.shape[1:]))}) -> {output}", quiet)
        emit_json({"output": str(output), "name": name, "count": len(labels), "shape": list(images.shape[1:])})

    app.add_typer(group, name="aux")
