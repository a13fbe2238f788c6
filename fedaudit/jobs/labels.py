"""A label-recovery job: one registered method with its options, on one threat model, under one session."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fedaudit.channels import bn_statistics
from fedaudit.io.truth import Truth
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelMethod, LabelResult
from fedaudit.metrics.labels import CLSACC_VARIANT, counts, label_metrics
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel
from fedaudit.verdict.labels import label_evidence


def describe_threat_model_inputs(tm: ThreatModel) -> dict[str, Any]:
    return {"checkpoint": {"path": str(tm.checkpoint.path), "sha256": tm.checkpoint.sha256},
            "update": {"path": str(tm.update.path), "sha256": tm.update.sha256}}


@dataclass
class LabelJob:
    session: Session
    tm: ThreatModel
    method: str = "auto"
    options: dict[str, Any] | None = None  # as given (names -> values or text); the method fills in its defaults
    instance: LabelMethod = field(init=False)

    def __post_init__(self) -> None:
        self.instance = LABEL_METHODS.get(self.method)(self.options)

    def result(self) -> LabelResult:
        """The method's raw result (benchmarks score it themselves)."""
        type(self.instance).check_applicable(self.tm, self.session)
        return self.instance.run(self.tm, self.session)

    def run(self, truth: Truth | None = None) -> dict[str, Any]:
        """The JSON result of ``fedaudit labels``; with ``truth``, InsAcc/ClsAcc/LnAcc/LeAcc against it."""
        cls = type(self.instance)
        t0 = time.perf_counter()
        result = self.result()
        elapsed = time.perf_counter() - t0
        aux = self.session.aux
        out = {
            "method": self.method,
            "paper": cls.paper,
            "counts_capable": cls.counts_capable,
            "num_samples": int(result.counts_int.sum()),
            "counts": [float(v) for v in result.counts.tolist()],
            "counts_int": result.counts_int.tolist(),
            "labels": result.labels,
            "options": self.instance.opts,
            "aux": None if aux is None else aux.describe(),
            "seed": self.session.seed,
            "diagnostics": result.diagnostics,
            "warnings": result.warnings,
            "timing_s": round(elapsed, 4),
        }
        if truth is not None:
            true = counts(truth.step_labels(self.tm.meta.local_steps), self.tm.spec.num_classes)
            out["truth_counts"] = true.tolist()
            out["metrics"] = {**label_metrics(result.counts_int, true), "ClsAcc_variant": CLSACC_VARIANT}
        out["evidence"] = label_evidence(self.tm, self.session, self.method, result)  # truth-free (docs/methods/verdict.md)
        out["channels"] = {"bn_statistics": bn_statistics.availability(self.tm)}
        out["inputs"] = describe_threat_model_inputs(self.tm)
        return out
