"""``fedaudit labels <method>``: one subcommand per registered label method, built from its declared options."""

from __future__ import annotations

import inspect as pyinspect
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer
from rich.table import Table

from fedaudit.cli.console import emit_json, err_console
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.method_options import collect_options, option_params
from fedaudit.cli.options import (AllowCustomArchOpt, CheckpointArg, DeviceOpt, IgnoreBaseOpt, OutputOpt, QuietOpt,
                                  SeedOpt, UpdateArg)
from fedaudit.device import resolve_device
from fedaudit.io.truth import load_truth
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelContext
from fedaudit.labels.run import load_aux, run_labels
from fedaudit.threat_model import load_threat_model

labels_app = typer.Typer(no_args_is_help=True, help="Recover the batch's labels from the update (one method per subcommand).")

P = pyinspect.Parameter
COMMON = [
    P("checkpoint", P.POSITIONAL_OR_KEYWORD, annotation=CheckpointArg),
    P("update", P.POSITIONAL_OR_KEYWORD, annotation=UpdateArg),
    P("aux", P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[Path], typer.Option("--aux", help="Auxiliary (public) images: folder, image or .safetensors.")]),
    P("aux_labels", P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[str], typer.Option("--aux-labels", help="Labels of the aux images: '3,1,...' or 'names'.")]),
    P("dummy", P.KEYWORD_ONLY, default=False, annotation=Annotated[bool, typer.Option("--dummy", help="Use N(0,1) dummy inputs instead of aux images.")]),
    P("num_dummy", P.KEYWORD_ONLY, default=1000, annotation=Annotated[int, typer.Option("--num-dummy", help="How many dummies.")]),
    P("resize", P.KEYWORD_ONLY, default=False, annotation=Annotated[bool, typer.Option("--resize", help="Resize aux images to the model's input.")]),
    P("batch_size", P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[int], typer.Option("--batch-size", "-b", help="Batch size when the update does not record it.")]),
    P("truth", P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[Path], typer.Option("--truth", "-t", help="Ground truth: adds InsAcc, ClsAcc, LnAcc, LeAcc.")]),
    P("seed", P.KEYWORD_ONLY, default=0, annotation=SeedOpt),
    P("device", P.KEYWORD_ONLY, default="cpu", annotation=DeviceOpt),
    P("output", P.KEYWORD_ONLY, default=None, annotation=OutputOpt),
    P("quiet", P.KEYWORD_ONLY, default=False, annotation=QuietOpt),
    P("allow_custom_arch", P.KEYWORD_ONLY, default=False, annotation=AllowCustomArchOpt),
    P("ignore_base_mismatch", P.KEYWORD_ONLY, default=False, annotation=IgnoreBaseOpt),
]


def _table(out: dict) -> Table:
    truth = out.get("truth_counts")
    t = Table("class", "estimate", "count", *(["truth"] if truth else []), title=f"labels: {out['method']}"
              + (f" -> {out['diagnostics']['chosen']}" if "chosen" in out["diagnostics"] else ""))
    for c, (f, n) in enumerate(zip(out["counts"], out["counts_int"])):
        if n or f > 0.05 or (truth and truth[c]):
            t.add_row(str(c), f"{f:.3f}", str(n), *([str(truth[c])] if truth else []))
    if "metrics" in out:
        m = out["metrics"]
        t.caption = "  ".join(f"{k} {m[k]:.3f}" for k in ("InsAcc", "ClsAcc", "LnAcc", "LeAcc"))
    return t


def _command(name: str, method):
    def command(**kw) -> None:
        options = collect_options(method.options, kw)
        torch.manual_seed(kw["seed"])
        tm = load_threat_model(kw["checkpoint"], kw["update"], allow_custom_arch=kw["allow_custom_arch"],
                               check_base=not kw["ignore_base_mismatch"])
        dev = resolve_device(kw["device"])
        tm.model.to(dev)
        aux = load_aux(tm, kw["aux"], kw["aux_labels"], kw["dummy"], kw["num_dummy"], kw["seed"], kw["resize"])
        ctx = LabelContext(aux=aux, seed=kw["seed"], device=dev, batch_size=kw["batch_size"],
                           options=options)
        truth = load_truth(kw["truth"]) if kw["truth"] else None
        out = run_labels(name, tm, ctx, truth)
        out["inputs"] = {"checkpoint": {"path": str(kw["checkpoint"]), "sha256": tm.checkpoint.sha256},
                         "update": {"path": str(kw["update"]), "sha256": tm.update.sha256}}
        emit_json(out, kw["output"])
        con = err_console(kw["quiet"])
        con.print(_table(out))
        for w in out["warnings"]:
            con.print(f"warning: {w}")

    command.__signature__ = pyinspect.Signature(COMMON + option_params(method.options))
    command.__doc__ = f"{method.summary} [{method.paper}]"
    command.__name__ = name.replace("-", "_")
    return handle_errors(command)


def register(app) -> None:
    for name, method in LABEL_METHODS:
        labels_app.command(name)(_command(name, method))
    app.add_typer(labels_app, name="labels")
