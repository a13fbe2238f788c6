"""One subcommand per registered method (``labels``, ``reconstruct``, ``defend``), built from the method's
declared options as the light catalog lists them (fedaudit/catalog.py: no torch import until a command runs); the
handler gets the method class, its validated options and the shared flags."""

from __future__ import annotations

import inspect as pyinspect
from collections.abc import Callable
from typing import Annotated, Any, cast

import typer

from fedaudit.catalog import Family, MethodInfo
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.panels import grouped

P = pyinspect.Parameter


def option_params(options) -> list[P]:
    """``--name`` keyword parameters for each MethodOption (shown in the subcommand's --help); a bool option is a
    ``--name/--no-name`` switch."""
    return [P(o.name.replace("-", "_"), P.KEYWORD_ONLY, default=o.default,
              annotation=Annotated[o.type, typer.Option(
                  f"--{o.name}/--no-{o.name}" if o.type is bool else f"--{o.name}",
                  help=o.help + (f" ({' | '.join(o.choices)})" if o.choices else ""))])
            for o in options]


def command_with(params: list[P], fn: Callable[..., None]):
    """``fn(**kw)`` as a command whose flags are ``params`` (shared ones from fedaudit/cli/shared.py), in panels."""
    cast(Any, fn).__signature__ = pyinspect.Signature(grouped(params, [], ""))
    return handle_errors(fn)


def _command(family: Family, info: MethodInfo, params: list[P], handler: Callable[[Any, dict[str, Any], dict[str, Any]], None]):
    keys = {o.name: o.name.replace("-", "_") for o in info.options}

    def command(**kw) -> None:
        cls = family.load(info.name)  # the implementation (and torch) is imported here, when the command runs
        options = cls.parse_options({name: kw.pop(key) for name, key in keys.items()})
        handler(cls, options, kw)

    own = option_params(info.options)
    cast(Any, command).__signature__ = pyinspect.Signature(grouped(params, own, f"{info.name} options"))
    command.__doc__ = f"{info.summary} [{info.paper}]"
    command.__name__ = info.name.replace("-", "_")
    return handle_errors(command)


Handler = Callable[[Any, dict[str, Any], dict[str, Any]], None]


def method_subcommands(app: typer.Typer, name: str, help_text: str, family: Family,
                       params: Callable[[MethodInfo], list[P]], handler: Handler,
                       more: tuple[tuple[Family, Callable[[MethodInfo], list[P]], Handler], ...] = ()) -> None:
    """Add ``fedaudit NAME <method>`` for every method of the catalog ``family``: ``params(info)`` are the shared flags;
    ``more``: other families in the same group (the text attacks beside the image ones), each with its flags and
    handler."""
    group = typer.Typer(no_args_is_help=True, help=help_text)
    for fam, make_params, handle in ((family, params, handler), *more):
        for method_name, info in fam:
            group.command(method_name)(_command(fam, info, make_params(info), handle))
    app.add_typer(group, name=name)
