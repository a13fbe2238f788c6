"""``fedaudit score RECON --truth TRUTH -o OUT``: score reconstructions (from any tool) against ground truth."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedaudit.cli.console import emit_json, info_line
from fedaudit.cli.errors import fail_exit, handle_errors
from fedaudit.cli.options import FailOn, FailOnOpt, ForceOpt, Gate, GateOpt, LpipsNet, LpipsNetOpt, LpipsWeightsOpt, QuietOpt
from fedaudit.cli.shared import session_from


def register(app) -> None:
    @app.command("score")
    @handle_errors
    def score(
        recon: Annotated[Path, typer.Argument(help="Reconstructions: .safetensors with 'images', a folder of PNGs, or one image.", show_default=False)],
        truth: Annotated[Path, typer.Option("--truth", "-t", help="Ground-truth file written by 'fedaudit capture --truth-out'.", show_default=False)],
        out: Annotated[Path, typer.Option("--out", "-o", help="Report folder to create.", show_default=False)],
        fail_on: FailOnOpt = FailOn.never,
        gate: GateOpt = Gate.UPPER,
        lpips_net: LpipsNetOpt = LpipsNet.vgg,
        lpips_weights: LpipsWeightsOpt = None,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Match reconstructions to truth one-to-one and report PSNR/SSIM/LPIPS and the FedLeak risk band."""
        from fedaudit.jobs.score import ScoreJob
        from fedaudit.report.outdir import OutputDir

        session = session_from(locals())
        outdir = OutputDir(out, force=force)
        with outdir:
            report = ScoreJob(session, recon, truth, gate.value).run_to(outdir, {"fail_on": fail_on.value})
        for line in ScoreJob.notes(out, report):
            info_line(line, quiet)
        emit_json(ScoreJob.summary(out, report))
        band = report.fail_on_band.band if report.fail_on_band else None
        if band:
            fail_exit(band, fail_on.value, quiet, f"measured, {gate.value} end")
