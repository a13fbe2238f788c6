"""A chain of registered defenses applied in order to a threat model's gradient, and what the server then sees.

``fedaudit defend`` and the audit run it through the defense job (fedaudit/jobs/defend.py); the labels self-check
re-applies an update's recorded chain to its simulated clients (fedaudit/verdict/label_self_check.py).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from fedaudit.defenses.registry import DEFENSES
from fedaudit.io.truth import Truth
from fedaudit.io.update import UpdateMeta
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def defended_meta(meta: UpdateMeta, records: list[dict]) -> UpdateMeta:
    """The defended upload is an averaged gradient (mean reduction); everything else the client reported stays."""
    return dataclasses.replace(meta, kind="gradient", reduction="mean", delta_sign=None,
                               optimizer={"name": "sgd", "momentum": 0.0, "weight_decay": 0.0},
                               defenses=list(meta.defenses) + records)


def apply_chain(tm: ThreatModel, chain: list[tuple[str, dict[str, Any]]], session: Session,
                batch: Truth | None = None) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """The defended averaged gradient of every present parameter (CPU) and one record per defense, in order."""
    grads = {k: tm.gradient[k].clone() for k in tm.present}
    records = []
    for name, options in chain:
        cls = DEFENSES.get(name)
        d = cls(options)
        t0 = time.perf_counter()
        grads = {k: v.cpu() for k, v in d.apply(tm, grads, session, batch).items()}
        records.append({"name": name, "options": options, "info": d.info, "seconds": round(time.perf_counter() - t0, 4),
                        "used_client_batch": cls.needs_batch})
    return grads, records


def upload_tensors(tm: ThreatModel, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What the defended upload holds: the gradients and the client's BN buffers, as they were."""
    out = {k: v.detach().float().contiguous() for k, v in grads.items()}
    out.update(tm.client_buffers)
    return out


def defended_threat_model(tm: ThreatModel, grads: dict[str, torch.Tensor], records: list[dict]) -> ThreatModel:
    """What a server receiving the defended upload would see."""
    if not records:
        return tm
    return ThreatModel.from_tensors(tm.checkpoint, upload_tensors(tm, grads), defended_meta(tm.meta, records),
                                    update_path=tm.update.path, update_sha256=tm.update.sha256, allow_nonfinite=True)
