"""The audit matrix: defenses (rows) x attacks (columns) on one update, with the ground truth.

Each defended copy is made in memory from the recorded update (the auditor plays the client, so defenses that
recompute the gradient use the truth batch); each attack then sees only that copy, as a server would. A cell
records the image metrics, the label method's InsAcc, the risk band and where its grid and full report are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedaudit.attacks import ATTACKS
from fedaudit.attacks.base import LOOP_OPTIONS, check_budget
from fedaudit.defenses.utility import accuracy_after_step
from fedaudit.errors import FedauditError, InputError, NotApplicable
from fedaudit.io.files import dumps_json, path_component
from fedaudit.io.images import load_images, parse_labels
from fedaudit.io.truth import Truth, check_truth
from fedaudit.jobs.defend import DefendJob, parse_defense
from fedaudit.jobs.labels import label_check_brief
from fedaudit.jobs.reconstruct import ReconstructJob
from fedaudit.labels import LABEL_METHODS
from fedaudit.methods import split_spec
from fedaudit.metrics.risk import worst_band
from fedaudit.report.audit_html import render_audit_html
from fedaudit.report.audit_record import AUDIT_SCHEMA_VERSION, AuditRecord, CellRecord, DefenseRow
from fedaudit.report.document import new_report
from fedaudit.report.outdir import OutputDir
from fedaudit.report.run_report import RunReport
from fedaudit.report.types import AuditCell, AuditSummary, build, pick
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel

LOOP_KEYS = tuple(o.name for o in LOOP_OPTIONS)


def parse_defense_rows(text: str) -> list[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """'none,prune:0.5,dp:eps=100+quantize:8' -> rows (label, chain); '+' chains defenses within one row."""
    rows = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        rows.append((item, [] if item == "none" else [parse_defense(part) for part in item.split("+")]))
    if not rows:
        raise InputError("--defenses is empty (use 'none' for the undefended update)")
    return rows


def parse_attack_options(specs: list[str]) -> dict[str, dict[str, Any]]:
    """'fedleak:lr=0.03:tv=0.2' -> {"fedleak": {"lr": 0.03, "tv": 0.2}}: only the keys given, loop settings
    (iterations, restarts, lr, schedule) among them, each converted and checked by its declaration."""
    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        name = spec.strip().split(":")[0]
        cls = ATTACKS.get(name)
        _, given = split_spec(spec, cls.options[0].name if cls.options else None)
        loop = {k: v for k, v in given.items() if k in LOOP_KEYS}
        options = {k: v for k, v in given.items() if k not in LOOP_KEYS}
        full, settings = cls.parse_options(options), cls.loop_settings(loop)
        out.setdefault(name, {}).update({k: full[k] for k in options}, **{k: settings[k] for k in loop})
    return out


def check_plan(attacks: list[str], labels: str | None, iterations: int | None, restarts: int | None) -> None:
    """Unknown attacks or label methods and impossible budgets are input errors, found before any work starts."""
    for a in attacks:
        ATTACKS.get(a)
    if labels:
        LABEL_METHODS.get(labels)
    check_budget(iterations, restarts)


def slug(text: str) -> str:
    return path_component(text)


def cell_record(defense: str, attack: str, report: RunReport, label_method: str | None, prefix: str,
                has_images: bool) -> CellRecord:
    """An audit cell from its run's report."""
    m, gate, run, labels = report.metrics, report.fail_on_band, report.attack, report.labels
    assert run is not None and labels is not None
    label_metrics = labels.metrics or {}
    return CellRecord(
        defense=defense, attack=attack, psnr=m.stat("psnr") if m else None, ssim=m.stat("ssim") if m else None,
        lpips=m.stat("lpips") if m else None, risk_band=m.risk_band if m else None,
        risk_band_range=m.risk_band_range if m else None, band_for_fail_on=gate.band if gate else None,
        risk_band_estimated=report.risk_band_estimated,
        risk_band_estimated_confidence=report.risk_band_estimated_confidence, label_method=label_method,
        label_insacc=label_metrics.get("InsAcc"), label_insacc_floor=(label_metrics.get("floor") or {}).get("InsAcc"),
        label_self_check=label_check_brief(labels.self_check()),
        iterations=run.iterations_run, seconds=report.timings.get("attack"), status=report.status,
        feature_relative_error=(m.features or {}).get("relative_error", {}).get("max") if m else None,
        report=f"{prefix}report.json", grid=f"{prefix}grid.png" if has_images else None)


@dataclass
class AuditJob:
    session: Session
    tm: ThreatModel
    truth: Truth
    defenses: list[tuple[str, list[tuple[str, dict[str, Any]]]]]  # (row label, chain); "none" is an empty chain
    attacks: list[str]
    attack_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # per attack: options and loop keys
    iterations: int | None = None  # for every attack unless its attack_options say otherwise
    restarts: int | None = None
    labels: str | None = None  # label method for every attack (default: each attack's own)
    eval_images: torch.Tensor | None = None
    eval_labels: torch.Tensor | None = None
    eval_lr: float | None = None
    self_check: int = 0  # the label method's self-check, once per defense row (its clients get the row's defenses)
    gate: str = "upper"  # which end of each cell's measured band range --fail-on tests (fedaudit/metrics/risk.py)
    truth_mismatch: str = "error"  # a truth recorded for another update: error | warn (fedaudit/io/truth.py)

    @staticmethod
    def summary(out, doc: AuditRecord) -> dict[str, Any]:
        """The JSON ``fedaudit audit`` prints (fedaudit/report/types.py ``AuditSummary``)."""
        cells = [pick(AuditCell, dataclasses.asdict(c)) for c in doc.cells]
        return build(AuditSummary, {"out": str(out), "status": doc.status, "worst_risk_band": doc.worst_risk_band,
                                    "worst_band_for_fail_on": doc.worst_band_for_fail_on, "gate": doc.gate,
                                    "cells": cells})

    def __post_init__(self) -> None:
        check_plan(self.attacks, self.labels, self.iterations, self.restarts)

    def preflight(self) -> None:
        """Every attack must be able to start on the recorded update (its needs and its label method's), checked
        before any work: a plan that cannot run is an input error, not a matrix of failed cells."""
        check_truth(self.truth, self.tm.update.sha256, self.truth_mismatch)  # another update's truth: refused first
        reasons = [r for attack in self.attacks for r in self.cell_job(self.tm, attack).why_not()]
        if reasons:
            raise NotApplicable("audit: " + "; ".join(reasons))

    def cell_job(self, tm: ThreatModel, attack: str, label_cache: dict[str, Any] | None = None) -> ReconstructJob:
        """One cell's run; the cells of a row share ``label_cache``, so each label reading runs once per row."""
        given = dict(self.attack_options.get(attack, {}))
        loop = {"iterations": self.iterations, "restarts": self.restarts}
        loop.update({k: given.pop(k) for k in LOOP_KEYS if k in given})
        return ReconstructJob(self.session, tm, attack, given, loop, labels=self.labels,
                              label_self_check=self.self_check, label_cache=label_cache, gate=self.gate,
                              truth_mismatch=self.truth_mismatch)

    def run(self, out: OutputDir, on_cell: Callable[[CellRecord], None] | None = None) -> Matrix:
        """Every cell's report under ``cells/``; returns rows, cells, whether it was interrupted, the worst band."""
        self.preflight()
        tm, truth = self.tm, self.truth
        rows: list[DefenseRow] = []
        cells: list[CellRecord] = []
        lr = self.eval_lr or tm.meta.local_lr or 0.1
        acc_before = acc_true = None
        ev_x, ev_y = self.eval_images, self.eval_labels
        if ev_x is not None and ev_y is not None:
            acc_before = accuracy_after_step(tm, {}, ev_x, ev_y, lr)
            acc_true = accuracy_after_step(tm, {k: tm.gradient[k] for k in tm.present}, ev_x, ev_y, lr)
        for label, chain in self.defenses:
            row = DefenseRow(defense=label, chain=[{"name": n, "options": o} for n, o in chain])
            rows.append(row)
            defend = DefendJob(self.session, tm, list(chain), truth)
            try:
                defended = defend.run()
            except FedauditError as exc:
                row.error = str(exc)
                continue
            row.records = defended.records
            utility: dict[str, Any] = defend.utility(defended)
            if ev_x is not None and ev_y is not None:
                utility.update(eval_lr=lr, accuracy_before=acc_before, accuracy_true_step=acc_true,
                               accuracy_defended_step=accuracy_after_step(tm, defended.grads, ev_x, ev_y, lr))
            row.utility = utility
            tm_d = defend.defended_threat_model(defended)
            label_cache: dict[str, Any] = {}
            for attack in self.attacks:
                try:
                    job = self.cell_job(tm_d, attack, label_cache)
                    result = job.run(truth)
                except FedauditError as exc:  # e.g. not applicable to this defended copy
                    cells.append(CellRecord(defense=label, attack=attack, error=str(exc)))
                    continue
                prefix = f"cells/{slug(label)}__{slug(attack)}/"
                result.report.defenses = row.records
                job.write(out, result, truth, prefix=prefix)
                cell = cell_record(label, attack, result.report, job.label_method, prefix, bool(result.images.shape[0]))
                cells.append(cell)
                if on_cell:
                    on_cell(cell)
                if result.interrupted:
                    return Matrix(rows, cells, True)
        return Matrix(rows, cells, False)

    def run_to(self, out: OutputDir, inputs: dict[str, Any],
               on_cell: Callable[[CellRecord], None] | None = None) -> AuditRecord:
        """Run the matrix and write audit.json and audit.html beside the cells (Ctrl-C keeps the finished cells)."""
        attack_names, rows = self.attacks, self.defenses
        record = new_report("audit", inputs, {"attacks": attack_names, "defenses": [r[0] for r in rows],
                                              "iterations": self.iterations, "restarts": self.restarts,
                                              "labels": self.labels, "eval_lr": self.eval_lr},
                            seed=self.session.seed, device=str(self.session.device))
        try:
            matrix = self.run(out, on_cell)
        except KeyboardInterrupt:
            matrix = Matrix([], [], True)
        failed = [f"{r.defense}: {r.error}" for r in matrix.rows if r.error is not None] + \
                 [f"{c.defense} x {c.attack}: {c.error}" for c in matrix.cells if c.error is not None]
        status = "interrupted" if matrix.interrupted else "incomplete" if failed else "complete"
        doc = AuditRecord(**{**record, "schema_version": AUDIT_SCHEMA_VERSION, "status": status}, failed=failed,
                          rows=matrix.rows, cells=matrix.cells, gate=self.gate,  # type: ignore[arg-type]
                          worst_risk_band=worst_band(c.risk_band for c in matrix.cells),  # type: ignore[arg-type]
                          worst_band_for_fail_on=worst_band(c.band_for_fail_on for c in matrix.cells),  # type: ignore[arg-type]
                          plan={"attacks": attack_names, "defenses": [r[0] for r in rows]})
        grids = {c.grid: (out.staging / c.grid).read_bytes() for c in matrix.cells if c.grid}
        out.write_text("audit.json", dumps_json(doc.to_json()))
        out.write_text("audit.html", render_audit_html(doc, grids))
        out.commit()
        return doc


@dataclass
class Matrix:
    """The cells run so far, their rows, and whether Ctrl-C stopped the matrix."""

    rows: list[DefenseRow]
    cells: list[CellRecord]
    interrupted: bool


def eval_set(path: Path | None, labels: str | None, tm: ThreatModel) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``--eval-images``/``--eval-labels`` as tensors (None when not given)."""
    if path is None:
        return None, None
    batch = load_images(path, tm.spec.input_shape)
    return batch.images, parse_labels(labels, batch, tm.spec.num_classes)
