"""A label-recovery job: one registered method with its options, on one threat model, under one session."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fedaudit.channels import bn_statistics
from fedaudit.io.truth import Truth, check_truth
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelMethod, LabelResult
from fedaudit.metrics.label_floor import uniform_floor
from fedaudit.metrics.labels import CLSACC_VARIANT, counts, label_metrics
from fedaudit.progress import Heartbeat
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel
from fedaudit.verdict.label_self_check import self_check
from fedaudit.verdict.labels import label_evidence


def describe_threat_model_inputs(tm: ThreatModel) -> dict[str, Any]:
    return {"checkpoint": {"path": str(tm.checkpoint.path), "sha256": tm.checkpoint.sha256},
            "update": {"path": str(tm.update.path), "sha256": tm.update.sha256}}


# methods whose counts model (or do not depend on) K local steps; bn-count reads the K batches' BN-buffer mixture
RAW_SUM_TOLERANCE = 0.25
# counts an even guess overlaps this much show little more than a guess that reads no update (a random batch of 64
# of 10 classes: 0.85 on average, of 320: 0.93; trained models' softmax methods regress to an even split whatever the
# batch; docs/results/labels.md, "The uniform floor")
EVEN_SPLIT_WARN = 0.9


@dataclass
class LabelJob:
    session: Session
    tm: ThreatModel
    method: str = "auto"
    options: dict[str, Any] | None = None  # as given (names -> values or text); the method fills in its defaults
    self_check: int = 0  # clients simulated with the reading's counts to estimate its accuracy (0: none)
    truth_mismatch: str = "error"  # a truth recorded for another update: error | warn (fedaudit/io/truth.py)
    instance: LabelMethod = field(init=False)

    def __post_init__(self) -> None:
        self.instance = LABEL_METHODS.get(self.method)(self.options)
        self.tm.on(self.session.device)  # one device route: the method reads tm.device, the attack the same

    def result(self) -> LabelResult:
        """The method's raw result (benchmarks score it themselves)."""
        type(self.instance).check_applicable(self.tm, self.session)
        return self.instance.run(self.tm, self.session)

    def reliability_warnings(self, result: LabelResult, evidence: dict[str, Any]) -> list[str]:
        """Say when the counts are unreliable: a one-step method on a K-step update, raw counts far from the
        batch size, label methods that disagree."""
        out = []
        k = self.tm.meta.local_steps
        used = result.diagnostics.get("chosen", self.method) if self.method == "auto" else self.method
        aware = used in LABEL_METHODS.names() and LABEL_METHODS.get(used).multi_step_aware  # models the K steps
        if k > 1 and not aware and result.diagnostics.get("strategy") != "evidence" \
                and not result.diagnostics.get("multi_step_aware"):  # a route that read every step's batch
            # auto has already chosen among the multi-step routes; elsewhere point to it, not to one method (RLU
            # trails bias-count by 15-40 points on a trained BN ConvNet's deltas: docs/results/labels.md)
            hint = "" if self.method == "auto" else "; 'labels auto' reads K-step updates with the multi-step methods"
            out.append(f"{used} assumes one local step; this update has K = {k} (the model moved during local "
                       f"training): its counts are approximate{hint}")
        n = int(result.counts_int.sum())
        raw = float(result.counts.double().clamp_min(0).sum())
        if type(self.instance).counts_capable and n and abs(raw - n) > RAW_SUM_TOLERANCE * n:
            out.append(f"the raw per-class estimates sum to {raw:.2f} for {n} samples: the method's assumptions do "
                       "not hold well here; the integer counts were forced to the batch size")
        agreement = evidence.get("agreement")
        if agreement is not None and agreement < 0.6:
            out.append(f"the label methods disagree (agreement {agreement:.2f}): treat these labels as uncertain")
        why = (evidence.get("self_check") or {}).get("near_guess")
        if why:
            out.append(f"self-check: {why}: the counts are no better than a guess that reads no update")
        even = evidence.get("even_split_overlap")
        if even is not None and even >= EVEN_SPLIT_WARN:
            out.append(f"the counts are close to an even split (an even guess overlaps them by {even:.2f}): they add "
                       "little to a guess that reads no update, and on a trained model the count methods drift toward "
                       "an even split whatever the batch, so they are weak evidence that the batch is balanced")
        return out

    def run(self, truth: Truth | None = None) -> dict[str, Any]:
        """The JSON result of ``fedaudit labels``; with ``truth``, InsAcc/ClsAcc/LnAcc/LeAcc against it and the
        uniform-count floor beside them (what an even guess that ignores the update scores)."""
        cls = type(self.instance)
        mismatch = check_truth(truth, self.tm.update.sha256, self.truth_mismatch) if truth is not None else None
        t0 = time.perf_counter()
        with Heartbeat(f"labels {self.method}", self.session.quiet, self.session.progress):
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
            metrics = label_metrics(result.counts_int, true)
            floor = uniform_floor(true)  # what an even guess scores on this batch, read without the update
            out["metrics"] = {**metrics, "ClsAcc_variant": CLSACC_VARIANT, "floor": floor,
                              "InsAcc_above_floor": metrics["InsAcc"] - float(floor["InsAcc"])}
        evidence = label_evidence(self.tm, self.session, self.method, result)  # truth-free (docs/methods/verdict.md)
        if self.self_check > 0:  # truth-free: the method re-run on simulated clients (docs/methods/labels.md)
            # each simulated client re-runs the method (and a capture): about the reading's own time apiece
            with Heartbeat(f"labels {self.method} self-check ({2 * self.self_check} simulated clients)",
                           self.session.quiet, self.session.progress, expected=2 * self.self_check * elapsed):
                evidence["self_check"] = self_check(self.tm, self.session, self.method, self.options, result,
                                                    self.self_check)
        out["evidence"] = evidence
        mismatched = [mismatch + "; the metrics are not this update's"] if mismatch else []
        out["warnings"] = list(result.warnings) + self.reliability_warnings(result, evidence) + mismatched
        out["channels"] = {"bn_statistics": bn_statistics.availability(self.tm)}
        out["inputs"] = describe_threat_model_inputs(self.tm)
        return out


def label_check_brief(check: dict[str, Any] | None) -> dict[str, Any] | None:
    """A label reading's self-check (``LabelReading.self_check()``) in brief (an audit cell's and a round client's
    ``label_self_check``): the estimated InsAcc, an even guess's on the same counts, near a guess or not."""
    if not check:
        return None
    if not check.get("clients"):
        return {"not_applicable": check.get("not_applicable")}
    return {"InsAcc": check["InsAcc"], "floor": check["floor"], "near_guess": check["near_guess"]}
