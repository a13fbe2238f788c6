"""``fedaudit models``: the registered architectures."""

from __future__ import annotations

from rich.table import Table

from fedaudit.cli.console import emit_json, err_console, refuse_existing
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import ForceOpt, OutputOpt, QuietOpt


def register(app) -> None:
    @app.command("models")
    @handle_errors
    def models(output: OutputOpt = None, force: ForceOpt = False, quiet: QuietOpt = False) -> None:
        """List registered architectures (any 'torchvision.<name>' and 'module:factory' also work)."""
        from fedaudit.models import MODELS

        if output is not None and str(output) != "-":
            refuse_existing(output, force)
        rows = [{"name": n, "description": e.description, "default_input_shape": list(e.default_input_shape),
                 "paper": e.paper} for n, e in MODELS]
        emit_json({"models": rows, "also": ["torchvision.<any classification model>", "module:factory"]}, output)
        table = Table("name", "default input", "description", title="fedaudit models")
        for n, e in MODELS:
            table.add_row(n, "x".join(map(str, e.default_input_shape)), e.description)
        err_console(quiet).print(table)
