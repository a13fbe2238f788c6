"""A text-attack run: load the language-model folder and the update (fedaudit/text_threat_model.py), run the attack,
band what it recovered (fedaudit/metrics/text_risk.py: measured with the truth, else from what the attack certified)
and write report.json, report.html and recovered.txt into one output folder, atomically."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedaudit.attacks.text import TEXT_ATTACKS
from fedaudit.errors import InputError, NotApplicable, RuntimeFailure
from fedaudit.io import files
from fedaudit.io.text_truth import TextTruth, load_text_truth
from fedaudit.io.truth import check_truth
from fedaudit.jobs.gate import gate_on
from fedaudit.jobs.reconstruct import max_iterations
from fedaudit.labels.text_classes import classifier_classes
from fedaudit.metrics.text import text_scores
from fedaudit.metrics.text_risk import estimated_text_band, measured_text_band
from fedaudit.progress import Heartbeat
from fedaudit.report.document import new_report
from fedaudit.report.outdir import OutputDir
from fedaudit.report.text_html import render_text_html
from fedaudit.report.text_report import RecoveredSequence, SequencePair, TextMeasured, TextReport, TextVerdict
from fedaudit.report.types import TextReconstructSummary, build
from fedaudit.session import Session
from fedaudit.text_threat_model import TextThreatModel, captured_in_eval, dropout_rate, load_text_threat_model
from fedaudit.verdict.text_scope import what_it_reveals


@dataclass
class TextReconstructJob:
    session: Session
    checkpoint: Path
    update: Path
    attack: str
    options: dict[str, Any]
    gate: str = "upper"
    truth_mismatch: str = "error"
    base: Path | None = None  # the base model's folder when ``checkpoint`` is a LoRA adapter folder

    def load(self) -> TextThreatModel:
        s = self.session
        return load_text_threat_model(self.checkpoint, self.update, base=self.base, batch_size=s.batch_size,
                                      batch_size_mode=s.batch_size_mode, check_base=s.check_base)

    def run_to(self, outdir: OutputDir, truth_path: Path | None) -> TextReport:
        """Run and write the folder (committed); an attack that cannot apply raises NotApplicable before any write."""
        torch.manual_seed(self.session.seed)
        tm = self.load().on(self.session.device)
        truth = load_text_truth(truth_path) if truth_path is not None else None
        mismatch = check_truth(truth, tm.update.sha256, self.truth_mismatch) if truth is not None else None
        options = self.options  # FEDAUDIT_MAX_ITERATIONS caps the optimising text attacks' steps too (smoke runs)
        cap = max_iterations()
        if cap is not None and int(options.get("steps") or 0) > cap:
            options = {**options, "steps": cap}
        attack = TEXT_ATTACKS.get(self.attack)(**options)
        if why := attack.reasons(tm.checkpoint, tm.gradient, tm.meta.local_steps):
            raise NotApplicable(f"{self.attack}: {'; '.join(why)}")
        weights = "adapter_model.safetensors" if tm.checkpoint.adapter else "model.safetensors"
        record = new_report("reconstruct", {"checkpoint": f"{tm.checkpoint.source}/{weights}",
                                            "update": self.update, "truth": truth_path},
                            {"attack": self.attack, **options, "gate": self.gate}, self.session.seed,
                            device=str(self.session.device))
        t0 = time.perf_counter()
        try:
            with Heartbeat(f"reconstruct {self.attack}", self.session.quiet, self.session.progress):
                result = attack.run(tm.checkpoint, tm.gradient, tm.batch_size, tm.meta.local_steps, tm.local,
                                    labels=self._labels(tm, attack))
        except (torch.OutOfMemoryError, MemoryError):
            raise RuntimeFailure(f"out of memory running {self.attack} on a {tm.checkpoint.model_type} of width "
                                 f"{tm.checkpoint.width} on {self.session.device}: try --device cpu, or for dager "
                                 "a smaller --chunk") from None
        record["timings"]["attack"] = round(time.perf_counter() - t0, 4)
        tok = tm.checkpoint.tokenizer
        sequences = [RecoveredSequence(i, tok.decode(s), s, bool(c), float(sc))
                     for i, (s, c, sc) in enumerate(zip(result.sequences, result.exact, result.scores))]
        certified = sum(s.certified for s in sequences)
        diag = result.diagnostics
        reason = (f"{self.attack} is approximate and its recovered batch does not reproduce the update"
                  if diag.get("certifies") is False else
                  "saturated: the batch's visible tokens reach the model's width" if diag.get("saturated") else
                  "the adapter's rank is reached: the batch has more visible tokens than its gradient shows"
                  if diag.get("rank_bound_reached") else
                  None if diag.get("consistent", True) else "inconsistent: more sequences than the batch holds")
        held = (f"the round's {tm.lines} lines ({tm.meta.local_steps} local steps of B = {tm.batch_size})"
                if tm.meta.local_steps > 1 and tm.lines else None)
        p = dropout_rate(tm.checkpoint.model)
        premise = (f"the model has dropout (p = {p:g}); an update recorded in train mode fails every exact check"
                   if p and self.attack == "dager" and not captured_in_eval(tm.meta) else None)
        est = estimated_text_band(certified, tm.lines, reason, held, premise)
        verdict = TextVerdict(est.band, est.range, f"{self.attack}'s exact checks", est.why,  # type: ignore[arg-type]
                              what_it_reveals(tm, diag, certified))
        measured = self._measure(truth, sequences, tok) if truth is not None else None
        if truth is not None:  # a certified line reproduces the update: a truth without it is another update's
            true = {tuple(t) for t in truth.sequences()}
            stray = [s.index for s in sequences if s.certified and tuple(s.token_ids) not in true]
            if stray:
                why = (f"--truth does not hold {len(stray)} of the lines {self.attack} certified (line "
                       f"{stray[0]}: replaying the round on it reproduces this update), so it is the truth of "
                       "another update")
                if self.truth_mismatch == "error":
                    raise InputError(f"{why} (--truth-mismatch warn measures anyway)")
                tm.warnings.append(why)
        if measured is not None:
            fail = gate_on(measured.band, measured.band_range, "measured", "measured against the truth", self.gate)
        else:
            fail = gate_on(est.band, est.range, "estimated", f"estimated without the truth, {verdict.source}", self.gate)
        report = TextReport.of({**record, "modality": "text", "attack": self.attack, "model": self._model(tm),
                                "update": self._update(tm), "sequences": sequences,
                                "diagnostics": diag, "verdict": verdict, "measured": measured, "fail_on_band": fail,
                                "truth_mismatch": mismatch, "warnings": list(tm.warnings)})
        report.html = "report.html"
        outdir.write_text("recovered.txt", "".join(s.text.replace("\n", " ") + "\n" for s in sequences))
        outdir.write_text("report.json", files.dumps_json(report.to_json()))
        outdir.write_text("report.html", render_text_html(report))
        outdir.commit()
        return report

    @staticmethod
    def _labels(tm: TextThreatModel, attack: Any) -> torch.Tensor | None:
        """A classifier's batch labels for the attacks that use them (``uses_labels``: TAG, LAMP), counted from its
        bias gradient (fedaudit/labels/text_classes.py); None for a decoder or without the batch size."""
        if tm.checkpoint.kind != "encoder" or not attack.uses_labels or not tm.batch_size:
            return None
        classes, _ = classifier_classes(tm.checkpoint, tm.gradient, tm.batch_size)
        return classes

    @staticmethod
    def _measure(truth: TextTruth, sequences: list[RecoveredSequence], tok) -> TextMeasured:
        true_ids = truth.sequences()
        true_text = [tok.decode(s) for s in true_ids]
        scores = text_scores(true_ids, true_text, [s.token_ids for s in sequences], [s.text for s in sequences])
        band = measured_text_band([r["rouge1"] for r in scores.per_sequence], [r["exact"] for r in scores.per_sequence])
        pairs = [SequencePair(i, true_text[i], j, None if j is None else sequences[j].text,
                              r["token_accuracy"], r["rouge1"], r["rouge2"], r["rougeL"], bool(r["exact"]))
                 for (i, j), r in zip(scores.pairs, scores.per_sequence)]
        exact = sum(p.exact for p in pairs)
        return TextMeasured(scores.token_accuracy, scores.rouge1, scores.rouge2, scores.rougeL, scores.exact_rate,
                            exact, len(pairs), band.band, band.range, band.why, pairs)  # type: ignore[arg-type]

    @staticmethod
    def _model(tm: TextThreatModel) -> dict[str, Any]:
        cfg = tm.checkpoint.model.config
        return {"path": tm.checkpoint.source, "model_type": tm.checkpoint.model_type, "kind": tm.checkpoint.kind,
                "width": tm.checkpoint.width, "layers": tm.checkpoint.layers, "vocab_size": int(cfg.vocab_size),
                "sha256": tm.checkpoint.sha256, "adapter": tm.checkpoint.adapter}

    @staticmethod
    def _update(tm: TextThreatModel) -> dict[str, Any]:
        m = tm.meta
        return {"path": str(tm.update.path), "sha256": tm.update.sha256, "kind": m.kind, "batch_size": m.batch_size,
                "local_steps": m.local_steps, "shared": len(tm.present), "withheld": tm.absent}


def text_summary(report: TextReport, out: Path) -> dict[str, Any]:
    """The stdout document of a text run (fedaudit/report/types.py ``TextReconstructSummary``)."""
    m = report.measured
    fail = report.fail_on_band
    return build(TextReconstructSummary, {
        "modality": "text", "out": str(out), "status": report.status, "attack": report.attack,
        "batch_size": report.update.get("batch_size"),
        "recovered": len(report.sequences), "certified": report.certified,
        "sequences": [s.text for s in report.sequences],
        "metrics": None if m is None else {"token_accuracy": m.token_accuracy, "rouge1": m.rouge1, "rouge2": m.rouge2,
                                           "rougeL": m.rougeL, "exact_rate": m.exact_rate},
        "risk_band": m.band if m else None, "risk_band_range": m.band_range if m else None,
        "risk_band_estimated": report.verdict.band if report.verdict else None,
        "risk_band_estimated_range": report.verdict.range if report.verdict else None,
        "reveals": report.verdict.reveals if report.verdict else [],
        "fail_on": None if fail is None else {"band": fail.band, "gate": fail.gate, "source": fail.source_kind,
                                              "line": fail.line}})
