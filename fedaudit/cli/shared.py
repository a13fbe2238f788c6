"""The flags the per-method commands share, as parameters, and the Session and aux source they make."""

from __future__ import annotations

import inspect as pyinspect
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from fedaudit.cli.options import (
    AllowCustomArchOpt,
    BaseOpt,
    CheckpointArg,
    DeviceOpt,
    FailOn,
    FailOnOpt,
    ForceOpt,
    FormatOpt,
    Gate,
    GateOpt,
    IgnoreBaseOpt,
    LpipsNet,
    LpipsNetOpt,
    LpipsWeightsOpt,
    OutputFormat,
    OutputOpt,
    ProgressMode,
    ProgressOpt,
    ProxiesOpt,
    QuietOpt,
    SeedOpt,
    TruthMismatch,
    TruthMismatchOpt,
    UpdateArg,
)

if TYPE_CHECKING:
    from fedaudit.session import AuxSource, Session

P = pyinspect.Parameter


def _kw(name: str, default: Any, annotation) -> P:
    return P(name, P.KEYWORD_ONLY, default=default, annotation=annotation)


def flag(name: str, kind: Any, help_text: str, *flags: str, default: Any = P.empty, envvar: str | None = None) -> P:
    """A keyword parameter of a generated subcommand: ``--name`` (or ``flags``) of type ``kind``; no default
    makes it required; ``envvar`` supplies it when the flag is not given."""
    flags = flags or ("--" + name.replace("_", "-"),)
    show = default is not P.empty and default is not None
    return _kw(name, default, Annotated[kind, typer.Option(*flags, help=help_text, show_default=show, envvar=envvar)])



PARAMS: dict[str, P] = {p.name: p for p in [
    P("checkpoint", P.POSITIONAL_OR_KEYWORD, annotation=CheckpointArg),
    P("update", P.POSITIONAL_OR_KEYWORD, annotation=UpdateArg),
    _kw("aux", None, Annotated[Optional[Path], typer.Option("--aux", help=(
        "Auxiliary (public) images: folder, image or .safetensors, or builtin:cifar10 | builtin:cifar100 | "
        "builtin:imagenet | builtin:digits (offline sets, resized to the model's input)."))]),
    _kw("aux_labels", None, Annotated[Optional[str], typer.Option("--aux-labels", help="Labels of the aux images: '3,1,...' or 'names'.")]),
    _kw("dummy", False, Annotated[bool, typer.Option("--dummy", help="Use N(0,1) dummy inputs instead of aux images.")]),
    _kw("num_dummy", 1000, Annotated[int, typer.Option("--num-dummy", help="How many dummies.")]),
    _kw("resize", False, Annotated[bool, typer.Option("--resize", help="Resize aux images to the model's input.")]),
    _kw("batch_size", None, Annotated[Optional[int], typer.Option("--batch-size", "-b", help=(
        "Batch size when the update does not record it (--force overrides a recorded one)."))]),
    _kw("truth", None, Annotated[Optional[Path], typer.Option("--truth", "-t", help="Ground truth: adds InsAcc, ClsAcc, LnAcc, LeAcc.")]),
    _kw("self_check", 0, Annotated[int, typer.Option("--self-check", min=0, help=(
        "Estimate the labels' accuracy without the truth: re-run the method on N clients simulated from the labelled "
        "aux images with the counts it read, and on N even ones (2N runs of the method)."))]),
    _kw("seed", 0, SeedOpt),
    _kw("device", "auto", DeviceOpt),
    _kw("output", None, OutputOpt),
    _kw("fail_on", FailOn.never, FailOnOpt),
    _kw("gate", Gate.UPPER, GateOpt),
    _kw("format", OutputFormat.json, FormatOpt),
    _kw("truth_mismatch", TruthMismatch.error, TruthMismatchOpt),
    _kw("proxies", 3, ProxiesOpt),
    _kw("lpips_net", LpipsNet.vgg, LpipsNetOpt),
    _kw("lpips_weights", None, LpipsWeightsOpt),
    _kw("force", False, ForceOpt),
    _kw("quiet", False, QuietOpt),
    _kw("progress", ProgressMode.auto, ProgressOpt),
    _kw("allow_custom_arch", False, AllowCustomArchOpt),
    _kw("ignore_base_mismatch", False, IgnoreBaseOpt),
    _kw("base", None, BaseOpt),
]}


def params(*names: str | P) -> list[P]:
    """The shared parameters by name, in this order (a Parameter is passed through)."""
    return [n if isinstance(n, P) else PARAMS[n] for n in names]


def emit_result(kw: dict[str, Any], command: str, summary: dict[str, Any], band: str | None,
                round_dir: str | None = None) -> None:
    """The stdout document, or its SARIF form with ``--format sarif`` (its exit code: 1 when ``band`` reaches
    ``--fail-on``, as the command will exit)."""
    from fedaudit.cli.console import emit_json

    if kw.get("format", OutputFormat.json) != OutputFormat.sarif:
        emit_json(summary)
        return
    from fedaudit.cli.errors import reaches
    from fedaudit.report.sarif import leakage_sarif

    code = 1 if reaches(band, kw["fail_on"].value) else 0  # the exit the command's gate will take
    emit_json(leakage_sarif(command, summary, str(kw.get("update") or round_dir), code, round_dir))


def session_from(kw: dict[str, Any]) -> Session:
    """The run's Session from whichever shared flags the command has."""
    from fedaudit.session import Session  # imports torch: only when a command runs, never for --help

    lpips_weights = kw.get("lpips_weights")
    return Session.create(device=kw.get("device", "auto"), seed=kw.get("seed", 0), batch_size=kw.get("batch_size"),
                          batch_size_mode="override" if kw.get("force") else "check",
                          quiet=kw.get("quiet", False), force=kw.get("force", False),
                          progress=getattr(kw.get("progress"), "value", "auto"),
                          allow_custom_arch=kw.get("allow_custom_arch", False),
                          check_base=not kw.get("ignore_base_mismatch", False),
                          lpips_net=getattr(kw.get("lpips_net"), "value", "vgg"),
                          lpips_weights=str(lpips_weights) if lpips_weights else None)


def aux_source(kw: dict[str, Any]) -> AuxSource:
    from fedaudit.errors import InputError
    from fedaudit.session import AuxSource

    if kw.get("num_dummy", 1000) < 1:
        raise InputError(f"--num-dummy must be >= 1, got {kw['num_dummy']}")

    return AuxSource(kw.get("aux"), kw.get("aux_labels"), kw.get("dummy", False), kw.get("num_dummy", 1000),
                     kw.get("resize", False))
