"""``fedaudit defend <defense> CKPT UPDATE -o defended.safetensors``: one subcommand per registered defense.

The checkpoint is needed as everywhere else: to convert a delta/weights update to a gradient, to check the base
hash, and for the defenses that recompute the gradient from the client's batch (``--batch``).
"""

from __future__ import annotations

import inspect as pyinspect
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer

from fedaudit.cli.commands.labels import COMMON as LABEL_COMMON
from fedaudit.cli.console import emit_json, info_line, refuse_existing
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.method_options import collect_options, option_params
from fedaudit.cli.options import ForceOpt
from fedaudit.defenses import DEFENSES
from fedaudit.defenses.base import DefenseContext
from fedaudit.defenses.run import apply_defenses, write_defended
from fedaudit.io.truth import load_truth
from fedaudit.threat_model import load_threat_model

defend_app = typer.Typer(no_args_is_help=True, help="Apply a defense to a recorded update (one defense per subcommand; chain by re-running).")

P = pyinspect.Parameter
_SHARED = {p.name: p for p in LABEL_COMMON}
COMMON = [
    _SHARED["checkpoint"], _SHARED["update"],
    P("out", P.KEYWORD_ONLY, annotation=Annotated[Path, typer.Option("--output", "-o", help="Defended update to write (.safetensors).", show_default=False)]),
    P("batch", P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[Path], typer.Option("--batch", help="The client's batch (a truth file: images, labels) for defenses that recompute the gradient.")]),
    _SHARED["seed"],
    P("force", P.KEYWORD_ONLY, default=False, annotation=ForceOpt),
    *(_SHARED[k] for k in ("quiet", "allow_custom_arch", "ignore_base_mismatch")),
]


def _command(name: str, defense):
    def command(**kw) -> None:
        options = collect_options(defense.options, kw)
        refuse_existing(kw["out"], kw["force"])
        torch.manual_seed(kw["seed"])
        tm = load_threat_model(kw["checkpoint"], kw["update"], allow_custom_arch=kw["allow_custom_arch"],
                               check_base=not kw["ignore_base_mismatch"])
        ctx = DefenseContext(batch=load_truth(kw["batch"]) if kw["batch"] else None, seed=kw["seed"])
        grads, records = apply_defenses(tm, [(name, options)], ctx)
        write_defended(kw["out"], tm, grads, records)
        g0 = torch.cat([tm.gradient[k].reshape(-1).double() for k in tm.present])
        g1 = torch.cat([grads[k].reshape(-1).double() for k in tm.present])
        rel = float((g1 - g0).norm() / g0.norm().clamp_min(1e-300))
        info_line(f"{name}: relative gradient change {rel:.4g} -> {kw['out']}", kw["quiet"])
        emit_json({"output": str(kw["out"]), "defense": records[-1], "relative_gradient_error": rel,
                   "defenses_applied": len(tm.meta.defenses) + 1})

    command.__signature__ = pyinspect.Signature(COMMON + option_params(defense.options))
    command.__doc__ = f"{defense.summary} [{defense.paper}]"
    command.__name__ = name.replace("-", "_")
    return handle_errors(command)


def register(app) -> None:
    for name, defense in DEFENSES:
        defend_app.command(name)(_command(name, defense))
    app.add_typer(defend_app, name="defend")
