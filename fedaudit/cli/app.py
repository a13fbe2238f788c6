"""The Typer app. Commands live one per module in ``fedaudit.cli.commands``; this file only assembles them."""

from __future__ import annotations

import contextlib
import os
import sys

import typer

from fedaudit import __version__
from fedaudit.cli.commands import (
    audit,
    audit_round,
    aux,
    capture,
    defend,
    importers,
    init_checkpoint,
    inspect,
    labels,
    lpips_export,
    models,
    reconstruct,
    scan,
    score,
    train_critic,
    train_inverter,
)
from fedaudit.cli.console import error_line
from fedaudit.cli.examples import add_examples
from fedaudit.errors import EXIT_INPUT, EXIT_INTERRUPTED

EPILOG = ("Exit codes: 0 ok, 1 leakage at or above --fail-on, 2 bad input or usage, 3 runtime failure, "
          "130 interrupted. Results go to stdout (or -o); tables, progress and logs to stderr.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fedaudit {__version__}")
        raise typer.Exit()


def make_app() -> typer.Typer:
    app = typer.Typer(
        name="fedaudit",
        help="Audit recorded federated-learning updates for gradient leakage.",
        epilog=EPILOG,
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
        pretty_exceptions_enable=False,
        pretty_exceptions_show_locals=False,
        add_completion=False,
    )

    @app.callback()
    def root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
        """fedaudit: label recovery, reconstruction attacks, defenses and reports for captured FL updates."""

    for module in (models, inspect, labels, reconstruct, defend, audit, audit_round, capture, importers, init_checkpoint, scan, score,
                   lpips_export, train_inverter, train_critic, aux):
        module.register(app)
    add_examples(app)
    return app


app = make_app()


def _invoke(command) -> int:
    """Run the command line: Click's main without its conversions (Typer's turns an interrupt that lands outside a
    command, e.g. while the help prints, into a silent exit 130; here it reaches :func:`main`, which says so)."""
    try:
        with command.make_context("fedaudit", sys.argv[1:]) as ctx:
            rv = command.invoke(ctx)
    except typer.Exit as e:
        return e.exit_code
    except EOFError:  # Click's own conversion, kept: main() says "aborted"
        raise typer.Abort() from None
    except BrokenPipeError:  # the reader closed stdout (`| head`): exit 1 quietly, as Click does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return rv if isinstance(rv, int) else 0


def main() -> None:
    """Entry point: usage errors become one stderr line with exit 2 (Click would print a boxed panel)."""
    command = typer.main.get_command(app)
    if len(sys.argv) <= 1:  # no command: a usage error; the help goes to stderr, stdout stays for results
        help_ctx = command.context_class(command, info_name="fedaudit")
        with contextlib.redirect_stdout(sys.stderr):  # Typer's rich help prints itself to stdout
            text = command.get_help(help_ctx)
            if text:
                print(text)
        sys.exit(EXIT_INPUT)
    try:
        code = _invoke(command)
    except KeyboardInterrupt:
        error_line("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        # Click's usage errors (vendored inside typer, so matched by shape, not by class import)
        if hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int):
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            if exc.format_message():  # empty for "no arguments: help shown"
                error_line(exc.format_message() + hint)
            sys.exit(getattr(exc, "exit_code"))  # noqa: B009 - Click's exception, matched by shape
        if type(exc).__name__ == "Abort":
            error_line("aborted")
            sys.exit(EXIT_INTERRUPTED)
        raise
    sys.exit(code if isinstance(code, int) else 0)
