"""The ThreatModel: everything a server sees (checkpoint + recorded update + metadata), nothing more.

Label methods and attacks receive only this object; ground truth never enters it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from fedaudit.conversion import local_minus_global, to_average_gradient
from fedaudit.errors import InputError
from fedaudit.io.checkpoint import Checkpoint, load_checkpoint
from fedaudit.io.update import RecordedUpdate, UpdateMeta, load_update
from fedaudit.models import ModelSpec, final_linear


@dataclass
class ThreatModel:
    checkpoint: Checkpoint
    update: RecordedUpdate
    gradient: dict[str, torch.Tensor]  # averaged (mean-reduced) gradient g_hat of every *present* parameter
    present: list[str]  # parameters the update shares, in the model's order
    absent: list[str]  # parameters it withholds (restricted sharing)
    client_buffers: dict[str, torch.Tensor] = field(default_factory=dict)  # BN buffers after local training
    nonfinite: list[str] = field(default_factory=list)  # update tensors holding NaN/Inf (only when allowed)
    warnings: list[str] = field(default_factory=list)

    @property
    def spec(self) -> ModelSpec:
        return self.checkpoint.spec

    @property
    def model(self) -> nn.Module:
        return self.checkpoint.model

    @property
    def meta(self) -> UpdateMeta:
        return self.update.meta

    @property
    def batch_size(self) -> int | None:
        return self.meta.batch_size

    @property
    def final_layer(self) -> str | None:
        return final_linear(self.model)

    def grad(self, name: str) -> torch.Tensor | None:
        return self.gradient.get(name)

    @property
    def final_weight_grad(self) -> torch.Tensor | None:
        return self.grad(f"{self.final_layer}.weight") if self.final_layer else None

    @property
    def final_bias_grad(self) -> torch.Tensor | None:
        return self.grad(f"{self.final_layer}.bias") if self.final_layer else None

    @property
    def has_batchnorm(self) -> bool:
        return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in self.model.modules())


def load_threat_model(checkpoint_path: str | Path, update_path: str | Path, *, allow_custom_arch: bool = False,
                      allow_nonfinite: bool = False, check_base: bool = True) -> ThreatModel:
    """Load and cross-check a checkpoint and a recorded update; every inconsistency is an InputError."""
    ckpt = load_checkpoint(checkpoint_path, allow_custom_arch=allow_custom_arch)
    upd = load_update(update_path)
    src = f"update {str(update_path)!r}"
    if check_base and upd.meta.base_checkpoint_sha256 and upd.meta.base_checkpoint_sha256 != ckpt.sha256:
        raise InputError(f"{src} was recorded against checkpoint sha256 {upd.meta.base_checkpoint_sha256[:12]}..., "
                         f"not {ckpt.sha256[:12]}... (pass --ignore-base-mismatch to audit anyway)")
    params = dict(ckpt.model.named_parameters())
    buffers = dict(ckpt.model.named_buffers())
    for k, v in upd.tensors.items():
        ref = params.get(k, buffers.get(k))
        if ref is None:
            raise InputError(f"{src}: tensor {k!r} is not a parameter or buffer of {ckpt.spec.arch}")
        if tuple(v.shape) != tuple(ref.shape):
            raise InputError(f"{src}: tensor {k!r} has shape {list(v.shape)}, the model expects {list(ref.shape)}")
    nonfinite = [k for k, v in upd.tensors.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if nonfinite and not allow_nonfinite:
        raise InputError(f"{src}: tensor {nonfinite[0]!r} contains NaN or Inf"
                         + (f" (+{len(nonfinite) - 1} more)" if len(nonfinite) > 1 else ""))
    present = [k for k in params if k in upd.tensors]
    if not present:
        raise InputError(f"{src} shares no parameter of {ckpt.spec.arch}")
    absent = [k for k in params if k not in upd.tensors]
    global_params = {k: p.detach() for k, p in params.items()}
    gradient = to_average_gradient(upd.meta, {k: upd.tensors[k] for k in present}, global_params)
    client_buffers = {}
    for k in buffers:
        if k in upd.tensors:
            raw = upd.tensors[k]
            if upd.meta.kind == "delta":  # the buffer's change, applied to the global buffer
                raw = buffers[k] + local_minus_global(upd.meta, raw.to(buffers[k].dtype), buffers[k])
            client_buffers[k] = raw
    tm = ThreatModel(ckpt, upd, gradient, present, absent, client_buffers, nonfinite)
    if tm.has_batchnorm and upd.meta.bn_mode is None:
        tm.warnings.append("the model has BatchNorm but the update does not record fedaudit.bn_mode")
    if upd.meta.batch_size is None:
        tm.warnings.append("the update does not record fedaudit.batch_size; count-based label methods need it")
    return tm
