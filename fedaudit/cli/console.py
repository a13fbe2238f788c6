"""Streams: results (JSON) on stdout or ``-o FILE``; people-facing tables, progress and logs on stderr."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from fedaudit.errors import InputError

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x1b]")


def clean(text: str) -> str:
    """Strip control characters (terminal escapes in untrusted metadata, file names)."""
    return _CONTROL.sub("?", text)


def err_console(quiet: bool = False) -> Console:
    """A stderr console built per invocation (after flags are parsed); markup is off for untrusted text."""
    return Console(stderr=True, quiet=quiet, markup=False, highlight=False, soft_wrap=True)


def error_line(message: str) -> None:
    """One line on stderr, whatever the terminal width (Rich would wrap long messages)."""
    sys.stderr.write("fedaudit: error: " + clean(" ".join(message.split())) + "\n")
    sys.stderr.flush()


def info_line(message: str, quiet: bool = False) -> None:
    if not quiet:
        sys.stderr.write("fedaudit: " + clean(message) + "\n")
        sys.stderr.flush()


def refuse_existing(path: Path | None, force: bool) -> None:
    """Never silently replace an output file the user already has."""
    if path is not None and path.exists() and not force:
        raise InputError(f"{str(path)!r} already exists; pass --force to replace it")


def check_output_file(output: Path | None, force: bool) -> None:
    """Refuse to replace an existing ``-o FILE`` without ``--force`` (checked before any work starts)."""
    if output is not None and str(output) != "-" and Path(output).exists() and not force:
        raise InputError(f"output file {str(output)!r} already exists; pass --force to replace it")


def emit_json(obj: Any, output: Path | None = None) -> None:
    """The machine-readable result: to ``output`` atomically when given (``-`` means stdout), else stdout."""
    from fedaudit.io.files import atomic_write_text, dumps_json  # imports torch: only when a result is written

    text = dumps_json(obj)
    if output is not None and str(output) != "-":
        atomic_write_text(output, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
