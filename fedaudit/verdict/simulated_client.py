"""A client simulated with a recorded update's recipe: what the server would receive had this client trained on other
images. The label self-check (fedaudit/verdict/label_self_check.py) and the verdict's proxy batches
(fedaudit/jobs/proxies.py) both capture their clients here, so both follow the update exactly as it was recorded:
kind, batch size, local steps, learning rate, momentum, weight decay, reduction, BatchNorm mode, withheld tensors, BN
buffers carried or not, and the defenses the update records, re-applied with the client's own noise draw.
"""

from __future__ import annotations

from typing import Any

import torch

from fedaudit.client.capture import CaptureConfig, capture_update
from fedaudit.conversion import optimizer_terms
from fedaudit.defenses.chain import apply_chain, defended_threat_model
from fedaudit.io.truth import Truth
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def recipe(tm: ThreatModel) -> CaptureConfig:
    """The update's training recipe, as ``capture`` takes it."""
    meta, steps = tm.meta, tm.meta.local_steps
    momentum, wd = optimizer_terms(meta)
    kind = meta.kind if not meta.defenses else ("gradient" if steps == 1 else "delta")  # defended: re-applied below
    return CaptureConfig(batch_size=int(tm.batch_size or 0), local_steps=steps, lr=meta.local_lr, kind=kind,
                         reduction=meta.reduction or "mean", delta_sign=meta.delta_sign or "local_minus_global",
                         bn_mode="train" if tm.train_bn else "eval", momentum=momentum, weight_decay=wd,
                         withhold=tuple(tm.absent), include_buffers=bool(tm.client_buffers),
                         source={"simulated": True})


def recorded_chain(tm: ThreatModel) -> list[tuple[str, dict[str, Any]]] | None:
    """The defenses the update records, as (name, options) to re-apply; None where a record lacks its name."""
    chain = [(str(r["name"]), dict(r.get("options") or {})) for r in tm.meta.defenses if isinstance(r, dict) and "name" in r]
    return chain if len(chain) == len(tm.meta.defenses) else None


def simulated_client(tm: ThreatModel, session: Session, images: torch.Tensor, labels: torch.Tensor,
                     cfg: CaptureConfig, chain: list[tuple[str, dict[str, Any]]], seed: int) -> tuple[ThreatModel, Truth]:
    """The server's view of a client that trained on ``images``/``labels`` with ``cfg`` and then went through the
    defenses ``chain`` (their noise drawn with ``seed``: each simulated client its own draw), and that client's
    truth (its images, labels and the local step each image belongs to)."""
    dev = tm.device
    cap = capture_update(tm.model, tm.spec, images.to(dev), labels.to(dev), cfg)
    sim = ThreatModel.from_tensors(tm.checkpoint, cap.tensors, cap.meta)
    batch = Truth(images.cpu(), labels.cpu(), cap.step.cpu(), [str(i) for i in range(len(labels))])
    if not chain:
        return sim, batch
    on_device = Truth(images.to(dev), labels.to(dev), cap.step, batch.names)
    grads, records = apply_chain(sim, chain, session.replace(seed=seed), on_device)
    return defended_threat_model(sim, grads, records), batch
