"""``fedaudit inspect`` on a language-model folder: what the update shares (which blocks, the embeddings) and which
text attacks apply, as plain data (fedaudit/report/types.py ``TextInspectResult``)."""

from __future__ import annotations

import re
from typing import Any

from fedaudit.attacks.text import TEXT_ATTACKS
from fedaudit.inspection import _norm
from fedaudit.report.types import TextInspectResult, build
from fedaudit.text_threat_model import TextThreatModel

_BLOCK = re.compile(r"\.(?:h|layer|layers)\.(\d+)\.")  # transformer.h.N.* (GPT-2), bert.encoder.layer.N.*, model.layers.N.*


def inspect_text_threat_model(tm: TextThreatModel) -> dict[str, Any]:
    ckpt = tm.checkpoint
    cfg = ckpt.model.config
    layers = []
    for name, p in ckpt.model.named_parameters():
        present = name in tm.update.tensors
        finite = name not in tm.nonfinite if present else None
        layers.append({"name": name, "shape": list(p.shape), "present": present, "finite": finite,
                       "grad_norm": _norm(tm.gradient[name]) if present and finite else None})
    blocks = sorted({int(m.group(1)) for k in tm.present if (m := _BLOCK.search(k))})
    embedding = ckpt.model.get_input_embeddings()
    embedding_names = [k for k, p in ckpt.model.named_parameters() if p is embedding.weight]
    attacks = {}
    bound = (f"the adapter's rank r = {ckpt.adapter['r']}" if ckpt.adapter is not None
             else f"the width d = {ckpt.width}")
    for name, cls in TEXT_ATTACKS:
        why = cls.reasons(ckpt, tm.gradient, tm.meta.local_steps)
        limit = f"exact while the batch's visible tokens stay below {bound}"
        if tm.meta.local_steps > 1:  # a delta holds every step's lines, and its round-off floors the checks
            limit = (f"exact while the round's visible tokens (the lines of all {tm.meta.local_steps} local steps) stay "
                     f"below {bound} and the change stands above its float round-off")
        attacks[name] = {"applicable": not why, "why_not": why, "limit": limit}
    return build(TextInspectResult, {
        "modality": "text",
        "checkpoint": {"path": ckpt.source, "model_type": ckpt.model_type, "kind": ckpt.kind, "width": ckpt.width,
                       "layers": ckpt.layers, "vocab_size": int(cfg.vocab_size), "sha256": ckpt.sha256,
                       "adapter": ckpt.adapter},
        "update": {"path": str(tm.update.path), "sha256": tm.update.sha256},
        "kind": tm.meta.kind, "batch_size": tm.meta.batch_size, "local_steps": tm.meta.local_steps,
        "parameters_present": tm.present, "parameters_absent": tm.absent,
        "embeddings_shared": any(k in tm.present for k in embedding_names), "blocks_shared": blocks,
        "finite": not tm.nonfinite, "nonfinite_tensors": tm.nonfinite, "layers": layers, "attacks": attacks,
        "warnings": list(tm.warnings)})
