"""A scoring job: reconstructions from any tool against the ground truth, written as a report folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaudit.errors import InputError
from fedaudit.io.images import load_images
from fedaudit.io.truth import load_truth
from fedaudit.jobs.gate import fail_on_band
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.report.document import Timer, new_report
from fedaudit.report.outdir import OutputDir
from fedaudit.report.types import ScoreSummary, build
from fedaudit.report.write import write_report
from fedaudit.session import Session


@dataclass
class ScoreJob:
    session: Session
    reconstructions: Path  # .safetensors with 'images', a folder of PNGs, or one image
    truth: Path
    gate: str = "upper"  # which end of the measured range --fail-on tests

    def run_to(self, out: OutputDir, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Match one-to-one, compute the metrics and write the report folder; returns the report."""
        t = load_truth(self.truth)
        rec = load_images(self.reconstructions, tuple(t.images.shape[1:])).images
        if rec.shape[0] < t.images.shape[0]:
            raise InputError(f"{rec.shape[0]} reconstructions for {t.images.shape[0]} truth images")
        s = self.session
        report = new_report("score", {"reconstructions": self.reconstructions, "truth": self.truth},
                            {**(options or {}), "lpips_net": s.lpips_net, "lpips_weights": s.lpips_weights})
        with Timer(report, "metrics"):
            report["metrics"] = evaluate_images(rec, t.images, s.lpips_net, s.lpips_weights, seed=s.seed)
        report["fail_on_band"] = fail_on_band(report, self.gate)
        write_report(out, report, rec, t.images)
        return report

    @staticmethod
    def summary(out: Path, report: dict[str, Any]) -> dict[str, Any]:
        """The JSON ``fedaudit score`` prints."""
        m = report["metrics"]
        return build(ScoreSummary, {
            "out": str(out), "risk_band": m["risk_band"], "risk_band_range": m["risk_band_range"],
            "band_for_fail_on": report["fail_on_band"]["band"], "gate": report["fail_on_band"]["gate"],
            "gate_line": report["fail_on_band"]["line"], "summary": m["summary"],
            "worst_image_risk_band": m["worst_image_risk_band"], "paper_best_match": m.get("paper_best_match"),
            "blank_baseline": m.get("blank_baseline"), "psnr_above_blank": m.get("psnr_above_blank")})
