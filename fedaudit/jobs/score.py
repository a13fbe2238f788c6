"""A scoring job: reconstructions from any tool against the ground truth, written as a report folder."""

from __future__ import annotations

import dataclasses
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
from fedaudit.report.run_report import RunReport
from fedaudit.report.types import ScoreSummary, build
from fedaudit.report.write import write_report
from fedaudit.session import Session


@dataclass
class ScoreJob:
    session: Session
    reconstructions: Path  # .safetensors with 'images', a folder of PNGs, or one image
    truth: Path
    gate: str = "upper"  # which end of the measured range --fail-on tests

    def run_to(self, out: OutputDir, options: dict[str, Any] | None = None) -> RunReport:
        """Match one-to-one, compute the metrics and write the report folder; returns the report."""
        t = load_truth(self.truth)
        rec = load_images(self.reconstructions, tuple(t.images.shape[1:])).images
        if rec.shape[0] < t.images.shape[0]:
            raise InputError(f"{rec.shape[0]} reconstructions for {t.images.shape[0]} truth images")
        s = self.session
        record = new_report("score", {"reconstructions": self.reconstructions, "truth": self.truth},
                            {**(options or {}), "lpips_net": s.lpips_net, "lpips_weights": s.lpips_weights})
        with Timer(record, "metrics"):
            metrics = evaluate_images(rec, t.images, s.lpips_net, s.lpips_weights, seed=s.seed)
        report = RunReport.of({**record, "metrics": metrics})
        report.fail_on_band = fail_on_band(report.metrics, None, self.gate)
        write_report(out, report, rec, t.images)
        return report

    @staticmethod
    def notes(out: Path, report: RunReport) -> list[str]:
        """The lines ``fedaudit score`` logs on stderr."""
        m, gate = report.metrics, report.fail_on_band
        assert m is not None and m.band is not None and m.risk_band_range is not None and gate is not None
        lo, hi = m.risk_band_range
        lines = [f"PSNR {m.stat('psnr'):.2f} dB, SSIM {m.stat('ssim'):.3f}, risk {m.risk_band} [{lo} .. {hi}] -> "
                 f"{out}/report.html", f"measured: {m.band.why}"]
        skipped = m.skipped_line()
        return lines + ([skipped] if skipped else []) + [gate.line or ""]

    @staticmethod
    def summary(out: Path, report: RunReport) -> dict[str, Any]:
        """The JSON ``fedaudit score`` prints."""
        m, gate = report.metrics, report.fail_on_band
        assert m is not None and gate is not None
        return build(ScoreSummary, {
            "out": str(out), "risk_band": m.risk_band, "risk_band_range": m.risk_band_range,
            "band_for_fail_on": gate.band, "gate": gate.gate, "gate_line": gate.line,
            "summary": dataclasses.asdict(m.summary) if m.summary else None,
            "worst_image_risk_band": m.worst_image_risk_band, "paper_best_match": m.paper_best_match,
            "blank_baseline": m.blank_baseline, "psnr_above_blank": m.psnr_above_blank})
