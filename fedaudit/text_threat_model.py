"""The server's view of a language-model update: the checkpoint folder, the recorded update and what it shares,
cross-checked as image updates are (fedaudit/threat_model.py): every mismatch is one InputError line (exit 2)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fedaudit.conversion import to_average_gradient
from fedaudit.errors import InputError
from fedaudit.io.text_adapter import load_text_model
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.io.update import MAX_BATCH, RecordedUpdate, load_update
from fedaudit.threat_model import HUGE

LORA_MARKERS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B")  # PEFT's adapter tensor names


@dataclass
class TextThreatModel:
    checkpoint: TextCheckpoint
    update: RecordedUpdate
    gradient: dict[str, torch.Tensor]  # the mean gradient (FedSGD) or the delta's pseudo-gradient, by parameter
    present: list[str]
    absent: list[str]
    nonfinite: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def meta(self):
        return self.update.meta

    @property
    def batch_size(self) -> int | None:
        return self.update.meta.batch_size


def _check_batch_size(update: RecordedUpdate, batch_size: int | None, mode: str) -> RecordedUpdate:
    if batch_size is None:
        return update
    if not 1 <= batch_size <= MAX_BATCH:
        raise InputError(f"--batch-size must be between 1 and {MAX_BATCH:,}, got {batch_size}")
    recorded = update.meta.batch_size
    if recorded and recorded != batch_size and mode != "override":
        raise InputError(f"--batch-size {batch_size} contradicts the batch size {recorded} that update "
                         f"{str(update.path)!r} records; pass --force to use {batch_size}")
    return dataclasses.replace(update, meta=dataclasses.replace(update.meta, batch_size=batch_size))


def load_text_threat_model(checkpoint_path: str | Path, update_path: str | Path, *, base: str | Path | None = None,
                           batch_size: int | None = None, batch_size_mode: str = "check", check_base: bool = True,
                           allow_nonfinite: bool = False) -> TextThreatModel:
    """Load a language-model folder (or a LoRA adapter folder on ``base``) and a recorded update of it; refuse an
    update of another model (a recorded base hash that differs, a tensor the model lacks or shapes otherwise), NaN/Inf,
    an all-zero upload. An adapter's update is keyed as PEFT saves adapters; it is read by the model's names."""
    ckpt = load_text_model(checkpoint_path, base)
    upd = _check_batch_size(load_update(update_path), batch_size, batch_size_mode)
    src = f"update {str(update_path)!r}"
    lora = [k for k in upd.tensors if any(m in k for m in LORA_MARKERS)]
    if lora and ckpt.adapter is None:
        raise InputError(f"{src} holds LoRA adapter tensors ({lora[0]!r}, {len(lora)} in all): give the adapter "
                         "folder (adapter_config.json, adapter_model.safetensors) as the checkpoint, with --base "
                         "for its base model")
    base = upd.meta.base_checkpoint_sha256
    if check_base and base and base != ckpt.sha256:
        what = "adapter (the round's global adapter weights" if ckpt.adapter else "base model (weights"
        raise InputError(f"{src} was recorded against another {what} sha256 {base[:12]}..., this "
                         f"folder's {ckpt.sha256[:12]}...); pass --ignore-base-mismatch to audit anyway")
    upd = dataclasses.replace(upd, tensors={ckpt.param_key(k): v for k, v in upd.tensors.items()})
    params = dict(ckpt.model.named_parameters())
    for k, v in upd.tensors.items():
        if k not in params:
            raise InputError(f"{src}: tensor {k!r} is not a parameter of the {ckpt.model_type} model in "
                             f"{ckpt.source!r} (an update of another model?)")
        if tuple(v.shape) != tuple(params[k].shape):
            raise InputError(f"{src}: tensor {k!r} has shape {list(v.shape)}, the model's is "
                             f"{list(params[k].shape)} (an update of another model?)")
        if not v.is_floating_point():
            raise InputError(f"{src}: tensor {k!r} has dtype {str(v.dtype).replace('torch.', '')}; an update must "
                             "be floating point")
    nonfinite = [k for k, v in upd.tensors.items() if not torch.isfinite(v).all()]
    if nonfinite and not allow_nonfinite:
        raise InputError(f"{src}: tensor {nonfinite[0]!r} contains NaN or Inf"
                         + (f" (+{len(nonfinite) - 1} more)" if len(nonfinite) > 1 else ""))
    huge = [k for k, v in upd.tensors.items() if k not in nonfinite and v.numel() and float(v.abs().max()) > HUGE]
    if huge and not allow_nonfinite:
        raise InputError(f"{src}: tensor {huge[0]!r} has entries above {HUGE:.0e} in magnitude (a diverged or "
                         "corrupt update)")
    present = [k for k in params if k in upd.tensors]
    absent = [k for k in params if k not in upd.tensors]
    raw = {k: upd.tensors[k] for k in present if k not in nonfinite}
    gradient = to_average_gradient(upd.meta, raw, {k: params[k].detach() for k in raw})
    if not allow_nonfinite and not any(bool(g.any()) for g in gradient.values()):
        raise InputError(f"{src}: every parameter's update is zero: the client uploaded no change")
    tm = TextThreatModel(ckpt, upd, gradient, present, absent, nonfinite)
    if upd.meta.batch_size is None:
        tm.warnings.append("the update does not record fedaudit.batch_size: DAGER cannot tell a consistent search "
                           "(at most B sequences) from one that let too much through")
    return tm
