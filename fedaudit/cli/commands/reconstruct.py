"""``fedaudit reconstruct <attack>``: one subcommand per registered attack, built from its declared options."""

from __future__ import annotations

import inspect as pyinspect
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer

from fedaudit.attacks import ATTACKS
from fedaudit.attacks.loop import LoopConfig
from fedaudit.attacks.run import ReconstructRequest, reconstruct
from fedaudit.cli.commands.labels import COMMON as LABEL_COMMON
from fedaudit.cli.console import emit_json, info_line
from fedaudit.cli.errors import fail_exit, handle_errors
from fedaudit.cli.method_options import collect_options, option_params
from fedaudit.cli.options import FailOn, FailOnOpt, ForceOpt, LpipsNet, LpipsNetOpt, LpipsWeightsOpt
from fedaudit.device import resolve_device
from fedaudit.errors import EXIT_INTERRUPTED, InputError
from fedaudit.io.files import safetensors_bytes
from fedaudit.io.truth import load_truth
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelContext
from fedaudit.labels.run import load_aux
from fedaudit.report.outdir import OutputDir
from fedaudit.report.write import write_report
from fedaudit.threat_model import load_threat_model

reconstruct_app = typer.Typer(no_args_is_help=True, help="Reconstruct the client's images from the update (one attack per subcommand).")

P = pyinspect.Parameter
_SHARED = {p.name: p for p in LABEL_COMMON if p.name != "output"}
COMMON = [
    _SHARED["checkpoint"], _SHARED["update"],
    P("out", P.KEYWORD_ONLY, annotation=Annotated[Path, typer.Option("--out", "-o", help="Report folder to create.", show_default=False)]),
    P("labels", P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[str], typer.Option("--labels", help="Label method (see 'fedaudit labels'); default: auto (hfgi for the hfgi attack).", show_default=False)]),
    P("labels_file", P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[Path], typer.Option("--labels-file", help="Labels from 'fedaudit labels -o FILE' (JSON) or a safetensors 'labels' tensor.")]),
    *(_SHARED[k] for k in ("aux", "aux_labels", "dummy", "num_dummy", "resize", "batch_size", "truth")),
    "LOOP_OPTIONS",
    P("multi_step", P.KEYWORD_ONLY, default="merged", annotation=Annotated[str, typer.Option("--multi-step", help="For K-step deltas: merged (one batch of B*K, FedLeak) or unroll (simulate K SGD steps).")]),
    P("checkpoint_every", P.KEYWORD_ONLY, default=0, annotation=Annotated[int, typer.Option("--checkpoint-every", help="Write a resumable checkpoint every N iterations.")]),
    P("checkpoint_file", P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[Path], typer.Option("--checkpoint-file", help="Where to write checkpoints (default: OUT.checkpoint.safetensors).")]),
    P("resume", P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[Path], typer.Option("--resume", help="Continue from a checkpoint of the same run.")]),
    P("fail_on", P.KEYWORD_ONLY, default=FailOn.never, annotation=FailOnOpt),
    P("lpips_net", P.KEYWORD_ONLY, default=LpipsNet.vgg, annotation=LpipsNetOpt),
    P("lpips_weights", P.KEYWORD_ONLY, default=None, annotation=LpipsWeightsOpt),
    *(_SHARED[k] for k in ("seed", "device")),
    P("force", P.KEYWORD_ONLY, default=False, annotation=ForceOpt),
    *(_SHARED[k] for k in ("quiet", "allow_custom_arch", "ignore_base_mismatch")),
]

SCHEDULES = ("step", "step-0.33", "cosine", "none")


def _loop_params(defaults: dict) -> list[P]:
    """--iterations/--restarts/--lr/--schedule, with this attack's defaults in the help text."""
    spec = [("iterations", ("--iterations", "-n"), int, "Iterations per restart."),
            ("restarts", ("--restarts",), int, "Restarts; the best by gradient distance is kept."),
            ("lr", ("--lr",), float, "Step size."),
            ("schedule", ("--schedule",), str, "Learning-rate schedule: step | step-0.33 | cosine | none.")]
    return [P(name, P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[kind], typer.Option(
        *flags, help=f"{text} This attack's default: {defaults[name]}.")]) for name, flags, kind, text in spec]


def _command(name: str, attack):
    def command(**kw) -> None:
        options = collect_options(attack.options, kw)
        kw["labels"] = kw["labels"] or attack.default_labels
        d = attack.defaults
        loop = LoopConfig(iterations=kw["iterations"] or d["iterations"], restarts=kw["restarts"] or d["restarts"],
                          lr=kw["lr"] or d["lr"], schedule=kw["schedule"] or d["schedule"], seed=kw["seed"],
                          checkpoint_every=kw["checkpoint_every"], resume=kw["resume"], quiet=kw["quiet"],
                          checkpoint_path=kw["checkpoint_file"] or Path(f"{kw['out']}.checkpoint.safetensors"))
        if loop.schedule not in SCHEDULES:
            raise InputError(f"--schedule must be one of {', '.join(SCHEDULES)}")
        if loop.iterations < 1 or loop.restarts < 1:
            raise InputError("--iterations and --restarts must be >= 1")
        outdir = OutputDir(kw["out"], force=kw["force"])
        with outdir:
            torch.manual_seed(kw["seed"])
            tm = load_threat_model(kw["checkpoint"], kw["update"], allow_custom_arch=kw["allow_custom_arch"],
                                   check_base=not kw["ignore_base_mismatch"])
            dev = resolve_device(kw["device"])
            info_line(f"{name}: {tm.spec.arch}, {tm.meta.kind}, B={tm.batch_size}, K={tm.meta.local_steps}, device {dev}", kw["quiet"])
            aux = load_aux(tm, kw["aux"], kw["aux_labels"], kw["dummy"], kw["num_dummy"], kw["seed"], kw["resize"])
            label_method = LABEL_METHODS.get(kw["labels"])
            ctx = LabelContext(aux=aux, seed=kw["seed"], device=dev, batch_size=kw["batch_size"],
                               options={o.name: o.default for o in label_method.options})
            truth = load_truth(kw["truth"]) if kw["truth"] else None
            req = ReconstructRequest(name, options, loop, kw["labels"], kw["labels_file"], ctx, kw["multi_step"],
                                     kw["lpips_net"].value, str(kw["lpips_weights"]) if kw["lpips_weights"] else None, str(dev))
            inputs = {"checkpoint": kw["checkpoint"], "update": kw["update"], "truth": kw["truth"],
                      "labels_file": kw["labels_file"], "resume": kw["resume"]}
            report, images, extra = reconstruct(tm, req, truth, inputs)
            outdir.write_bytes("reconstruction.safetensors", safetensors_bytes(
                {"images": images, "labels": torch.tensor(report["attack"]["recovered_labels"]), **extra},
                {"fedaudit.file": "reconstruction", "fedaudit.attack": name}))
            write_report(outdir, report, images, truth.images if truth else None)
        summary = {"out": str(kw["out"]), "status": report["status"], "attack": name,
                   "distance": report["attack"]["distance"], "labels": report["labels"]["labels"],
                   "iterations_run": report["attack"]["iterations_run"]}
        recovered = report["attack"].get("recovered")
        if recovered and recovered.get("images_note"):
            info_line(recovered["images_note"], kw["quiet"])
        if "features" in report.get("metrics", {}):
            fm = report["metrics"]["features"]
            summary["feature_relative_error"] = fm["relative_error"]
            info_line(f"features: relative error mean {fm['relative_error']['mean']:.3g}, max {fm['relative_error']['max']:.3g}", kw["quiet"])
        if "risk_band" in report.get("metrics", {}):
            m = report["metrics"]
            summary.update(risk_band=m["risk_band"], summary=m["summary"], paper_best_match=m.get("paper_best_match"),
                           blank_baseline=m.get("blank_baseline"), psnr_above_blank=m.get("psnr_above_blank"))
            info_line(f"PSNR {m['summary']['psnr']['mean']:.2f} dB, SSIM {m['summary']['ssim']['mean']:.3f}, "
                      f"risk {m['risk_band']} -> {kw['out']}/report.html", kw["quiet"])
        else:
            info_line(f"{report['status']}: gradient distance {report['attack']['distance']:.4g} -> {kw['out']}/report.html", kw["quiet"])
        emit_json(summary)
        if report["status"] == "interrupted":
            info_line("interrupted: the best reconstruction so far and a partial report were written", kw["quiet"])
            raise typer.Exit(EXIT_INTERRUPTED)
        if "risk_band" in report.get("metrics", {}):
            fail_exit(report["metrics"]["risk_band"], kw["fail_on"].value, kw["quiet"])

    i = COMMON.index("LOOP_OPTIONS")
    params = COMMON[:i] + _loop_params(attack.defaults) + COMMON[i + 1:]
    command.__signature__ = pyinspect.Signature(params + option_params(attack.options))
    command.__doc__ = f"{attack.summary} [{attack.paper}]"
    command.__name__ = name
    return handle_errors(command)


def register(app) -> None:
    for name, attack in ATTACKS:
        reconstruct_app.command(name)(_command(name, attack))
    app.add_typer(reconstruct_app, name="reconstruct")
