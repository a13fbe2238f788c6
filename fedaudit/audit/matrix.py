"""Run the audit matrix: defenses (rows) x attacks (columns) on one update, with the ground truth.

Each defended copy is made in memory from the recorded update (the auditor plays the client, so defenses that
recompute the gradient use the truth batch); each attack then sees only that copy, as a server would. A cell
records the image metrics, the label method's InsAcc, the risk band and where its grid and full report are.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from fedaudit.attacks import ATTACKS
from fedaudit.attacks.loop import LoopConfig
from fedaudit.attacks.run import ReconstructRequest, reconstruct
from fedaudit.defenses.base import DefenseContext
from fedaudit.defenses.run import apply_defenses, defended_threat_model
from fedaudit.defenses.utility import accuracy_after_step, relative_error
from fedaudit.errors import FedauditError
from fedaudit.io.truth import Truth
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelContext
from fedaudit.report.outdir import OutputDir
from fedaudit.report.write import write_report
from fedaudit.threat_model import ThreatModel


@dataclass
class AuditPlan:
    defenses: list[tuple[str, list[tuple[str, dict[str, Any]]]]]  # (label, chain); "none" is an empty chain
    attacks: list[str]
    attack_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # per attack, overriding defaults
    iterations: int | None = None
    restarts: int | None = None
    labels: str | None = None
    label_ctx: LabelContext | None = None
    seed: int = 0
    device: str = "cpu"
    lpips_net: str = "vgg"
    lpips_weights: str | None = None
    eval_images: torch.Tensor | None = None
    eval_labels: torch.Tensor | None = None
    eval_lr: float | None = None
    quiet: bool = True
    cells: list = field(default_factory=list)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)


def worst_band(cells: list[dict]) -> str | None:
    bands = [c["risk_band"] for c in cells if c.get("risk_band")]
    order = ["low", "medium", "high", "very_high"]
    return max(bands, key=order.index) if bands else None


def run_audit(tm: ThreatModel, truth: Truth, plan: AuditPlan, out: OutputDir, on_cell=None) -> dict[str, Any]:
    rows, cells = [], []
    true_grads = {k: tm.gradient[k] for k in tm.present}
    lr = plan.eval_lr or tm.meta.local_lr or 0.1
    acc_true = None
    if plan.eval_images is not None:
        acc_before = accuracy_after_step(tm, {}, plan.eval_images, plan.eval_labels, lr)
        acc_true = accuracy_after_step(tm, true_grads, plan.eval_images, plan.eval_labels, lr)
    for label, chain in plan.defenses:
        ctx = DefenseContext(batch=truth, seed=plan.seed, device=plan.device)
        row: dict[str, Any] = {"defense": label, "chain": [{"name": n, "options": o} for n, o in chain]}
        try:
            grads, records = apply_defenses(tm, chain, ctx)
        except FedauditError as exc:
            row["error"] = str(exc)
            rows.append(row)
            continue
        row["records"] = records
        row["utility"] = relative_error(true_grads, grads)
        if plan.eval_images is not None:
            row["utility"].update(eval_lr=lr, accuracy_before=acc_before, accuracy_true_step=acc_true,
                                  accuracy_defended_step=accuracy_after_step(tm, grads, plan.eval_images, plan.eval_labels, lr))
        tm_d = defended_threat_model(tm, grads, records) if chain else tm
        rows.append(row)
        for attack in plan.attacks:
            cls = ATTACKS.get(attack)
            cell: dict[str, Any] = {"defense": label, "attack": attack}
            given = dict(plan.attack_options.get(attack, {}))
            loop_given = {k: given.pop(k) for k in ("lr", "schedule", "iterations", "restarts") if k in given}
            options = {o.name: o.default for o in cls.options}
            options.update(given)
            loop = LoopConfig(iterations=loop_given.get("iterations") or plan.iterations or cls.defaults["iterations"],
                              restarts=loop_given.get("restarts") or plan.restarts or cls.defaults["restarts"],
                              lr=loop_given.get("lr", cls.defaults["lr"]), schedule=loop_given.get("schedule", cls.defaults["schedule"]),
                              seed=plan.seed, quiet=plan.quiet)
            method = plan.labels or cls.default_labels
            lm = LABEL_METHODS.get(method)
            lctx = copy.copy(plan.label_ctx or LabelContext())
            lctx.options = {o.name: o.default for o in lm.options}
            req = ReconstructRequest(attack, options, loop, method, None, lctx, "merged", plan.lpips_net,
                                     plan.lpips_weights, plan.device)
            try:
                report, images, _ = reconstruct(tm_d, req, truth, {})
            except FedauditError as exc:  # e.g. not applicable to this defended copy
                cell["error"] = str(exc)
                cells.append(cell)
                continue
            prefix = f"cells/{slug(label)}__{slug(attack)}/"
            report["defenses"] = row["records"]
            write_report(out, report, images, truth.images, prefix=prefix)
            m = report.get("metrics", {})
            summary = m.get("summary", {})
            cell.update({
                "psnr": (summary.get("psnr") or {}).get("mean"), "ssim": (summary.get("ssim") or {}).get("mean"),
                "lpips": (summary.get("lpips") or {}).get("mean"), "risk_band": m.get("risk_band"),
                "label_insacc": (report["labels"].get("metrics") or {}).get("InsAcc"), "label_method": method,
                "iterations": report["attack"]["iterations_run"], "seconds": report["timings"].get("attack"),
                "report": f"{prefix}report.json", "grid": f"{prefix}grid.png" if images.shape[0] else None,
                "status": report["status"],
                "feature_relative_error": (m.get("features") or {}).get("relative_error", {}).get("max"),
            })
            cells.append(cell)
            if on_cell:
                on_cell(cell)
            if report["status"] == "interrupted":
                return {"rows": rows, "cells": cells, "interrupted": True, "worst_risk_band": worst_band(cells)}
    return {"rows": rows, "cells": cells, "interrupted": False, "worst_risk_band": worst_band(cells)}
