"""A registered method's declared options as CLI parameters, and their values back as a validated dict."""

from __future__ import annotations

import inspect as pyinspect
from typing import Annotated, Any

import typer

from fedaudit.errors import InputError


def option_params(options) -> list[pyinspect.Parameter]:
    """``--name`` keyword parameters for each MethodOption (shown in the subcommand's --help)."""
    return [pyinspect.Parameter(o.name.replace("-", "_"), pyinspect.Parameter.KEYWORD_ONLY, default=o.default,
                                annotation=Annotated[o.type, typer.Option(
                                    f"--{o.name}", help=o.help + (f" ({' | '.join(o.choices)})" if o.choices else ""))])
            for o in options]


def collect_options(options, kw: dict[str, Any]) -> dict[str, Any]:
    """The values the user gave, keyed by option name; a value outside ``choices`` is an input error."""
    values = {o.name: kw[o.name.replace("-", "_")] for o in options}
    for o in options:
        if o.choices and values[o.name] not in o.choices:
            raise InputError(f"--{o.name} must be one of {', '.join(o.choices)}")
    return values
