"""``fedaudit score RECON --truth TRUTH -o OUT``: score reconstructions (from any tool) against ground truth."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedaudit.cli.console import emit_json, info_line
from fedaudit.cli.errors import fail_exit, handle_errors
from fedaudit.cli.options import FailOn, FailOnOpt, ForceOpt, LpipsNet, LpipsNetOpt, LpipsWeightsOpt, QuietOpt
from fedaudit.errors import InputError
from fedaudit.io.images import load_images
from fedaudit.io.truth import load_truth
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.report.document import Timer, new_report
from fedaudit.report.outdir import OutputDir
from fedaudit.report.write import write_report


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
                   "worst_image_risk_band": m["worst_image_risk_band"], "paper_best_match": m.get("paper_best_match"),
                   "blank_baseline": m.get("blank_baseline"), "psnr_above_blank": m.get("psnr_above_blank")})
        fail_exit(m["risk_band"], fail_on.value, quiet)
