"""``fedaudit score RECON --truth TRUTH -o OUT``: score reconstructions (from any tool) against ground truth."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedaudit.cli.console import emit_json, info_line
from fedaudit.cli.errors import fail_exit, handle_errors
from fedaudit.cli.options import FailOn, FailOnOpt, ForceOpt, LpipsNet, LpipsNetOpt, LpipsWeightsOpt, QuietOpt
from fedaudit.cli.shared import session_from


def register(app) -> None:
    @app.command("score")
    @handle_errors
    def score(
        recon: Annotated[Path, typer.Argument(help="Reconstructions: .safetensors with 'images', a folder of PNGs, or one image.", show_default=False)],
        truth: Annotated[Path, typer.Option("--truth", "-t", help="Ground-truth file written by 'fedaudit capture --truth-out'.", show_default=False)],
        out: Annotated[Path, typer.Option("--out", "-o", help="Report folder to create.", show_default=False)],
        fail_on: FailOnOpt = FailOn.never,
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
            report = ScoreJob(session, recon, truth).run_to(outdir, {"fail_on": fail_on.value})
        m = report["metrics"]
        info_line(f"PSNR {m['summary']['psnr']['mean']:.2f} dB, SSIM {m['summary']['ssim']['mean']:.3f}, "
                  f"risk {m['risk_band']} -> {out}/report.html", quiet)
        emit_json(ScoreJob.summary(out, report))
        fail_exit(m["risk_band"], fail_on.value, quiet)
