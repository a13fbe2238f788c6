"""``fedaudit inspect``: what an update contains and which methods can run on it, as plain data."""

from __future__ import annotations

import math
from typing import Any

import torch

from fedaudit.attacks import ATTACKS, april
from fedaudit.channels import bn_statistics
from fedaudit.defenses import DEFENSES
from fedaudit.labels import LABEL_METHODS
from fedaudit.report.types import InspectResult, build
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def _applicability(registry, tm: ThreatModel) -> dict[str, Any]:
    out = {}
    for name, method in registry:
        reasons = method.why_not(tm)
        out[name] = {"applicable": not reasons, "why_not": reasons, "aux": getattr(method, "aux", "none")}
        if getattr(method, "needs_batch", False):
            out[name]["needs_client_batch"] = True
    return out


def _attack_applicability(tm: ThreatModel) -> dict[str, Any]:
    """An attack applies when it does and its default label method does without aux data: the same check
    ``reconstruct`` makes before it starts when no --aux/--dummy is given (so the two always agree)."""
    out = _applicability(ATTACKS, tm)
    session = Session()
    for name, method in ATTACKS:
        labels = method.default_labels
        reasons = [f"default labels {labels}: {r}" for r in LABEL_METHODS.get(labels).why_not(tm, session)]
        if reasons:
            out[name]["why_not"] = out[name]["why_not"] + reasons
            out[name]["applicable"] = False
            out[name]["applicable_with_aux"] = not method.why_not(tm)
    return out


def _norm(t: torch.Tensor) -> float | None:
    """The L2 norm in float64 (a float32 norm of entries near 3e38 overflows), None when not finite."""
    v = float(t.double().norm())
    return v if math.isfinite(v) else None


def inspect_threat_model(tm: ThreatModel) -> dict[str, Any]:
    params = dict(tm.model.named_parameters())
    layers = []
    for name, p in params.items():
        present = name in tm.gradient
        finite = bool(torch.isfinite(tm.update.tensors[name]).all()) if present else None
        ok = bool(present and finite)
        layers.append({"name": name, "shape": list(p.shape), "present": present, "finite": finite,
                       "raw_norm": _norm(tm.update.tensors[name]) if ok else None,
                       "grad_norm": _norm(tm.gradient[name]) if ok else None})
    buffers = [{"name": k, "shape": list(v.shape)} for k, v in tm.client_buffers.items()]
    meta = tm.meta.as_dict()
    return build(InspectResult, {
        "checkpoint": {"path": str(tm.checkpoint.path), "sha256": tm.checkpoint.sha256, "arch": tm.spec.arch,
                       "arch_kwargs": tm.spec.kwargs, "num_classes": tm.spec.num_classes,
                       "input_shape": list(tm.spec.input_shape), "mean": list(tm.spec.mean), "std": list(tm.spec.std),
                       "num_parameters": sum(p.numel() for p in params.values())},
        "update": {"path": str(tm.update.path), "sha256": tm.update.sha256, **meta},
        "kind": tm.meta.kind,
        "batch_size": tm.meta.batch_size,
        "local_steps": tm.meta.local_steps,
        "final_layer": tm.final_layer,
        "has_batchnorm": tm.has_batchnorm,
        "parameters_present": tm.present,
        "parameters_absent": tm.absent,
        "restricted": bool(tm.absent),
        "client_buffers": buffers,
        "channels": {"bn_statistics": bn_statistics.availability(tm), "position_embedding": april.channel(tm)},
        "finite": not tm.nonfinite,
        "nonfinite_tensors": tm.nonfinite,
        "layers": layers,
        "label_methods": _applicability(LABEL_METHODS, tm),
        "attacks": _attack_applicability(tm),
        "defenses": _applicability(DEFENSES, tm),
        "warnings": tm.warnings,
    })
