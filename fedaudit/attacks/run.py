"""``fedaudit reconstruct``'s library face: labels -> attack loop -> metrics -> report folder."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedaudit.attacks import ATTACKS
from fedaudit.attacks.engine import GradientEngine
from fedaudit.attacks.loop import LoopConfig, optimize
from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors
from fedaudit.io.truth import Truth
from fedaudit.labels.base import LabelContext, samples_in_update
from fedaudit.labels.run import run_labels
from fedaudit.labels.features import output_layer_io
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.metrics.features import feature_recovery
from fedaudit.report.document import new_report
from fedaudit.threat_model import ThreatModel

MULTI_STEP = ("merged", "unroll")


@dataclass
class ReconstructRequest:
    attack: str
    options: dict[str, Any]
    loop: LoopConfig
    labels_method: str = "auto"
    labels_file: Path | None = None
    label_ctx: LabelContext | None = None
    multi_step: str = "merged"  # merged: one batch of B*K images (FedLeak); unroll: K simulated local steps
    lpips_net: str = "vgg"
    lpips_weights: str | None = None
    device: str = "cpu"


def read_labels_file(path: Path, expected: int, num_classes: int) -> list[int]:
    """Labels from ``fedaudit labels -o FILE`` (JSON with "labels") or a safetensors 'labels' tensor."""
    p = Path(path)
    if p.suffix == ".json":
        try:
            labels = json.loads(p.read_text())["labels"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"labels file {str(p)!r} is not a JSON object with a 'labels' list: {exc}") from None
    else:
        tensors, _ = read_safetensors(p, "labels file")
        if "labels" not in tensors:
            raise InputError(f"labels file {str(p)!r} has no 'labels' tensor")
        labels = tensors["labels"].tolist()
    if not all(isinstance(v, int) and 0 <= v < num_classes for v in labels):
        raise InputError(f"labels file {str(p)!r}: labels must be integers in [0, {num_classes - 1}]")
    if len(labels) != expected:
        raise InputError(f"labels file {str(p)!r} has {len(labels)} labels; the update mixes {expected} samples")
    return labels


def fingerprint(tm: ThreatModel, req: ReconstructRequest, labels: list[int]) -> str:
    blob = json.dumps([req.attack, req.options, req.multi_step, labels, tm.update.sha256, tm.checkpoint.sha256,
                       req.loop.iterations, req.loop.restarts, req.loop.lr, req.loop.schedule, req.loop.seed])
    return hashlib.sha256(blob.encode()).hexdigest()


def reconstruct(tm: ThreatModel, req: ReconstructRequest, truth: Truth | None = None,
                inputs: dict[str, Any] | None = None) -> tuple[dict[str, Any], torch.Tensor, dict[str, torch.Tensor]]:
    """Run the attack; returns the report (metrics when ``truth``), the reconstructed images (none when the
    attack stopped before images, e.g. RGLA without an inverter) and any other tensors it recovered."""
    attack_cls = ATTACKS.get(req.attack)
    attack_cls.check_applicable(tm)
    if req.multi_step not in MULTI_STEP:
        raise InputError(f"--multi-step must be one of {', '.join(MULTI_STEP)}")
    ctx = req.label_ctx or LabelContext()
    n = samples_in_update(tm, ctx)
    if req.labels_file is not None:
        labels = read_labels_file(req.labels_file, n, tm.spec.num_classes)
        label_report = {"source": "file", "file": str(req.labels_file), "labels": labels}
    else:
        out = run_labels(req.labels_method, tm, ctx, truth)
        labels = out["labels"]
        label_report = {"source": "method", **{k: out[k] for k in ("method", "labels", "counts", "diagnostics", "warnings")}}
        if "metrics" in out:
            label_report["metrics"] = out["metrics"]
    if len(labels) != n:
        raise InputError(f"{req.labels_method} recovered {len(labels)} labels for {n} samples (a set-only method); "
                         "choose a count-capable one (e.g. --labels auto)")
    unroll = req.multi_step == "unroll" and tm.meta.local_steps > 1
    if unroll and tm.meta.kind == "gradient":
        raise InputError("--multi-step unroll needs a delta or weights update")
    engine = GradientEngine(tm, req.device, unroll=unroll)
    attack = attack_cls(tm, engine, torch.tensor(labels), req.options, n)
    req.loop.fingerprint = fingerprint(tm, req, labels)
    result = optimize(attack, req.loop)
    report = new_report("reconstruct", inputs or {}, {
        "attack": req.attack, "attack_options": req.options, "labels": req.labels_method if req.labels_file is None else "file",
        "multi_step": req.multi_step if tm.meta.local_steps > 1 else None, "iterations": req.loop.iterations,
        "restarts": req.loop.restarts, "lr": req.loop.lr, "schedule": req.loop.schedule,
        "checkpoint_every": req.loop.checkpoint_every, "lpips_net": req.lpips_net}, seed=req.loop.seed, device=req.device)
    report["status"] = "interrupted" if result.interrupted else "complete"
    report["threat_model"] = {"arch": tm.spec.arch, "kind": tm.meta.kind, "batch_size": tm.batch_size,
                              "local_steps": tm.meta.local_steps, "parameters_matched": len(tm.present),
                              "parameters_withheld": len(tm.absent), "bn_mode": tm.meta.bn_mode}
    report["labels"] = label_report
    report["attack"] = {"name": req.attack, "paper": attack_cls.paper, "distance": result.distance,
                        "best_restart": result.best_restart, "iterations_run": result.iterations_run,
                        "diverged_restarts": result.diverged_restarts, "interrupted": result.interrupted,
                        "resumed_from": result.resumed_from, "recovered_labels": result.labels,
                        "seconds_per_iteration": result.seconds / max(result.iterations_run, 1),
                        "history": [list(h) for h in result.history]}
    report["timings"]["attack"] = round(result.seconds, 3)
    extra = result.extras.get("report")
    if extra is not None:
        report["attack"][result.extras.get("section", "details")] = extra
    tensors = result.extras.get("tensors", {})
    if truth is not None:
        if result.images.shape[0]:
            report["metrics"] = evaluate_images(result.images.cpu(), truth.images, req.lpips_net, req.lpips_weights)
        if "features" in tensors:
            true_f = output_layer_io(tm.model, tm.spec, tm.final_layer, truth.images, tm.meta.bn_mode == "train",
                                     chunk=max(len(truth.images), 1))[0]
            report.setdefault("metrics", {})["features"] = feature_recovery(
                tensors["features"], true_f, result.labels, truth.labels.tolist() if truth.labels is not None else None)
    return report, result.images.cpu(), tensors
