"""``fedaudit score RECON --truth TRUTH -o OUT``: score reconstructions (from any tool) against ground truth."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from fedaudit.cli.console import emit_json, info_line
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import ForceOpt, QuietOpt
from fedaudit.errors import EXIT_LEAKAGE, InputError
from fedaudit.io.images import load_images
from fedaudit.io.truth import load_truth
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.metrics.risk import at_or_above
from fedaudit.report.document import Timer, new_report
from fedaudit.report.outdir import OutputDir
from fedaudit.report.write import write_report


class FailOn(str, Enum):
    never = "never"
    medium = "medium"
    high = "high"
    very_high = "very_high"


class LpipsNet(str, Enum):
    vgg = "vgg"
    alex = "alex"


FailOnOpt = Annotated[FailOn, typer.Option("--fail-on", help="Exit 1 when the risk band (FedLeak PSNR bands) is at or above this.")]
LpipsNetOpt = Annotated[LpipsNet, typer.Option("--lpips-net", help="LPIPS backbone (vgg is the meaningful one at 32x32).")]
LpipsWeightsOpt = Annotated[Optional[Path], typer.Option("--lpips-weights", help="LPIPS model file from 'fedaudit lpips-export'.")]


def fail_exit(band: str, fail_on: FailOn, quiet: bool) -> None:
    """Exit 1 when ``band`` reaches ``--fail-on`` (after all output is written)."""
    if fail_on != FailOn.never and at_or_above(band, fail_on.value):
        info_line(f"leakage risk {band} is at or above --fail-on {fail_on.value}", quiet)
        raise typer.Exit(EXIT_LEAKAGE)


def register(app) -> None:
    @app.command("score")
    @handle_errors
    def score(
        recon: Annotated[Path, typer.Argument(help="Reconstructions: .safetensors with 'images', a folder of PNGs, or one image.", show_default=False)],
        truth: Annotated[Path, typer.Option("--truth", "-t", help="Ground-truth file written by 'fedaudit capture --truth'.", show_default=False)],
        out: Annotated[Path, typer.Option("--out", "-o", help="Report folder to create.", show_default=False)],
        fail_on: FailOnOpt = FailOn.never,
        lpips_net: LpipsNetOpt = LpipsNet.vgg,
        lpips_weights: LpipsWeightsOpt = None,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Match reconstructions to truth one-to-one and report PSNR/SSIM/LPIPS and the FedLeak risk band."""
        outdir = OutputDir(out, force=force)
        with outdir:
            t = load_truth(truth)
            rec = load_images(recon, tuple(t.images.shape[1:])).images
            if rec.shape[0] < t.images.shape[0]:
                raise InputError(f"{rec.shape[0]} reconstructions for {t.images.shape[0]} truth images")
            report = new_report("score", {"reconstructions": recon, "truth": truth},
                                {"fail_on": fail_on.value, "lpips_net": lpips_net.value,
                                 "lpips_weights": str(lpips_weights) if lpips_weights else None})
            with Timer(report, "metrics"):
                report["metrics"] = evaluate_images(rec, t.images, lpips_net.value,
                                                    str(lpips_weights) if lpips_weights else None)
            write_report(outdir, report, rec, t.images)
        m = report["metrics"]
        info_line(f"PSNR {m['summary']['psnr']['mean']:.2f} dB, SSIM {m['summary']['ssim']['mean']:.3f}, "
                  f"risk {m['risk_band']} -> {out}/report.html", quiet)
        emit_json({"out": str(out), "risk_band": m["risk_band"], "summary": m["summary"],
                   "worst_image_risk_band": m["worst_image_risk_band"]})
        fail_exit(m["risk_band"], fail_on, quiet)
