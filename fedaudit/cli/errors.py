"""Map exceptions to one stderr line and an exit code (0 ok, 1 leakage, 2 input, 3 runtime, 130 Ctrl-C).

``FEDAUDIT_DEBUG=1`` re-raises unexpected exceptions so their traceback shows.
"""

from __future__ import annotations

import functools
import os

import typer

from fedaudit.cli.console import error_line, info_line
from fedaudit.errors import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_LEAKAGE, EXIT_RUNTIME, FedauditError
from fedaudit.metrics.risk import at_or_above

# click's ClickException, whichever click Typer runs on (its own vendored copy from 0.2x, click itself before)
USAGE_ERRORS = tuple(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def reaches(band: str | None, fail_on: str) -> bool:
    """Whether ``band`` is at or above ``--fail-on`` (never: nothing reaches it)."""
    return band is not None and fail_on != "never" and at_or_above(band, fail_on)


def fail_exit(band: str, fail_on: str, quiet: bool, source: str = "measured") -> None:
    """Exit 1 when ``band`` reaches ``--fail-on`` (call after all output is written); ``source``: measured
    against the truth or estimated without it."""
    if reaches(band, fail_on):
        info_line(f"leakage risk {band} ({source}) is at or above --fail-on {fail_on}", quiet)
        raise typer.Exit(EXIT_LEAKAGE)


def handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except USAGE_ERRORS as exc:  # an option refused after parsing (BadParameter, UsageError): usage
            error_line(exc.format_message())
            raise typer.Exit(EXIT_INPUT) from None
        except FedauditError as exc:
            error_line(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            error_line("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except MemoryError:
            error_line("out of memory (try a smaller batch or --device cpu)")
            raise typer.Exit(EXIT_RUNTIME) from None
        except Exception as exc:  # noqa: BLE001 - anything else is a runtime failure, never a traceback
            if os.environ.get("FEDAUDIT_DEBUG"):
                raise
            error_line(f"internal error: {type(exc).__name__}: {exc} (set FEDAUDIT_DEBUG=1 for the traceback)")
            raise typer.Exit(EXIT_RUNTIME) from None

    return wrapper
