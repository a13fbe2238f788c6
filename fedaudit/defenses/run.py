"""Apply defenses in order to a ThreatModel's gradient; write the defended update or keep it in memory (audit)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from fedaudit.defenses import DEFENSES
from fedaudit.defenses.base import DefenseContext
from fedaudit.errors import NotApplicable
from fedaudit.io.update import RecordedUpdate, UpdateMeta, save_update
from fedaudit.methods import parse_spec
from fedaudit.threat_model import ThreatModel


def parse_defense(spec: str) -> tuple[str, dict[str, Any]]:
    """'prune', 'prune:0.5' (the first option), 'dp:eps=100:delta=1e-5' -> (name, options with defaults)."""
    return parse_spec(DEFENSES, spec)


def apply_defenses(tm: ThreatModel, specs: list[tuple[str, dict[str, Any]]], ctx: DefenseContext):
    """The defended gradients of the present parameters and one record per defense, in order."""
    grads = {k: tm.gradient[k].clone() for k in tm.present}
    records = []
    for name, options in specs:
        cls = DEFENSES.get(name)
        reasons = cls.why_not_ctx(tm, ctx)
        if reasons:
            raise NotApplicable(f"{name}: " + "; ".join(reasons))
        d = cls(options)
        t0 = time.perf_counter()
        grads = d.apply(tm, grads, ctx)
        records.append({"name": name, "options": options, "info": d.info, "seconds": round(time.perf_counter() - t0, 4),
                        "used_client_batch": cls.needs_batch})
    return grads, records


def defended_meta(meta: UpdateMeta, records: list[dict]) -> UpdateMeta:
    """The defended upload is an averaged gradient (mean reduction); everything else the client reported stays."""
    return dataclasses.replace(meta, kind="gradient", reduction="mean", delta_sign=None,
                               optimizer={"name": "sgd", "momentum": 0.0, "weight_decay": 0.0},
                               defenses=list(meta.defenses) + records)


def defended_threat_model(tm: ThreatModel, grads: dict[str, torch.Tensor], records: list[dict]) -> ThreatModel:
    meta = defended_meta(tm.meta, records)
    upd = RecordedUpdate(tm.update.path, tm.update.sha256, dict(grads), meta, meta.to_metadata())
    return ThreatModel(tm.checkpoint, upd, dict(grads), list(tm.present), list(tm.absent), dict(tm.client_buffers), [],
                       list(tm.warnings))


def write_defended(path, tm: ThreatModel, grads: dict[str, torch.Tensor], records: list[dict]):
    tensors = {k: v.detach().float().contiguous() for k, v in grads.items()}
    tensors.update({k: v for k, v in tm.client_buffers.items()})
    return save_update(path, tensors, defended_meta(tm.meta, records))
