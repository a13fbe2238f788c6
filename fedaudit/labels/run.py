"""Run a label method on a ThreatModel and score it against the truth: the library face of ``fedaudit labels``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from fedaudit.errors import InputError
from fedaudit.io.images import load_images, parse_labels
from fedaudit.io.truth import Truth
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import Aux, LabelContext, LabelResult
from fedaudit.labels.features import dummy_aux
from fedaudit.metrics.labels import CLSACC_VARIANT, counts, label_metrics
from fedaudit.threat_model import ThreatModel


def load_aux(tm: ThreatModel, path: Path | None, labels: str | None, dummy: bool, num_dummy: int, seed: int,
             resize: bool = False) -> Aux | None:
    if path is not None and dummy:
        raise InputError("give either --aux or --dummy, not both")
    if dummy:
        return dummy_aux(tm, num_dummy, seed)
    if path is None:
        return None
    batch = load_images(path, tm.spec.input_shape, resize=resize)
    y = parse_labels(labels, batch, tm.spec.num_classes) if (labels or batch.labels is not None) else None
    return Aux(batch.images, y, "images")


def truth_labels(truth: Truth, local_steps: int) -> torch.Tensor:
    """The labels behind the averaged gradient: each local step's batch, in order (batches cycle)."""
    batches = int(truth.step.max()) + 1
    return torch.cat([truth.labels[truth.step == k % batches] for k in range(local_steps)])


def run_labels(method_name: str, tm: ThreatModel, ctx: LabelContext, truth: Truth | None = None) -> dict[str, Any]:
    method = LABEL_METHODS.get(method_name)
    method.check_applicable(tm, ctx)
    t0 = time.perf_counter()
    result: LabelResult = method().run(tm, ctx)
    elapsed = time.perf_counter() - t0
    out = {
        "method": method_name,
        "paper": method.paper,
        "counts_capable": method.counts_capable,
        "num_samples": int(result.counts_int.sum()),
        "counts": [float(v) for v in result.counts.tolist()],
        "counts_int": result.counts_int.tolist(),
        "labels": result.labels,
        "options": ctx.options,
        "aux": None if ctx.aux is None else {"kind": ctx.aux.kind, "count": int(ctx.aux.images.shape[0]),
                                             "labelled": ctx.aux.labels is not None},
        "seed": ctx.seed,
        "diagnostics": result.diagnostics,
        "warnings": result.warnings,
        "timing_s": round(elapsed, 4),
    }
    if truth is not None:
        true = counts(truth_labels(truth, tm.meta.local_steps), tm.spec.num_classes)
        out["truth_counts"] = true.tolist()
        out["metrics"] = {**label_metrics(result.counts_int, true), "ClsAcc_variant": CLSACC_VARIANT}
    return out
