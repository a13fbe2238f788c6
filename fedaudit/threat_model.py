"""The ThreatModel: everything a server sees (checkpoint + recorded update + metadata), nothing more.

Label methods and attacks receive only this object; ground truth never enters it.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from fedaudit.conversion import (
    client_change,
    local_minus_global,
    momentum_weights,
    optimizer_terms,
    path_fractions,
    to_average_gradient,
)
from fedaudit.errors import InputError, NotApplicable
from fedaudit.io.checkpoint import Checkpoint, load_checkpoint
from fedaudit.io.update import MAX_BATCH, RecordedUpdate, UpdateMeta, check_update_tensors, load_update
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
    batch_size_source: str | None = None  # "metadata", "override" (--batch-size) or None (unknown)

    @classmethod
    def from_tensors(cls, checkpoint: Checkpoint, tensors: dict[str, torch.Tensor], meta: UpdateMeta, *,
                     update_path: str | Path = "<memory>", update_sha256: str = "",
                     raw_metadata: dict[str, str] | None = None, batch_size: int | None = None,
                     batch_size_mode: str = "check", allow_nonfinite: bool = False) -> ThreatModel:
        """The server's view of ``tensors`` (an upload described by ``meta``) against ``checkpoint``; every
        inconsistency is an InputError. ``batch_size`` overrides the recorded batch size (``--batch-size``), here
        and nowhere else, so label methods, conversion and attacks all see the same number. Against a different
        recorded batch size, ``batch_size_mode`` "check" refuses, "override" replaces it, "fill" keeps the recorded one."""
        src = f"update {str(update_path)!r}"
        meta = with_batch_size(meta, batch_size, batch_size_mode, src)
        params = dict(checkpoint.model.named_parameters())
        buffers = dict(checkpoint.model.named_buffers())
        nonfinite = check_update_tensors(tensors, {**buffers, **params}, src, f"a parameter or buffer of "
                                         f"{checkpoint.spec.arch}", allow_nonfinite=allow_nonfinite)
        present = [k for k in params if k in tensors]
        if not present:
            raise InputError(f"{src} shares no parameter of {checkpoint.spec.arch}")
        absent = [k for k in params if k not in tensors]
        global_params = {k: p.detach() for k, p in params.items()}
        gradient = to_average_gradient(meta, {k: tensors[k] for k in present}, global_params)
        client_buffers = {}
        for k in buffers:
            if k in tensors:
                raw = tensors[k]
                if meta.kind == "delta":  # the buffer's change, applied to the global buffer
                    raw = buffers[k] + local_minus_global(meta, raw.to(buffers[k].dtype), buffers[k])
                client_buffers[k] = raw
        update = RecordedUpdate(Path(update_path), update_sha256, dict(tensors), meta,
                                raw_metadata if raw_metadata is not None else meta.to_metadata())
        source = "override" if batch_size is not None else ("metadata" if meta.batch_size else None)
        tm = cls(checkpoint, update, gradient, present, absent, client_buffers, nonfinite, batch_size_source=source)
        if tm.has_batchnorm and meta.bn_mode is None:
            tm.warnings.append("the model has BatchNorm but the update does not record fedaudit.bn_mode")
        if meta.batch_size is None:
            tm.warnings.append("the update does not record fedaudit.batch_size; count-based label methods need it")
        return tm

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
    def device(self) -> torch.device:
        """Where the model lives: the one device route of label methods, channels and attacks alike (the jobs put the
        model on the session's device before anything runs)."""
        return next(self.model.parameters()).device

    def on(self, device: torch.device | str) -> ThreatModel:
        """The model moved to ``device`` (in place; the gradient tensors stay where they are, each use moves them)."""
        self.model.to(device)
        return self

    @property
    def batch_size(self) -> int | None:
        return self.meta.batch_size

    @property
    def train_bn(self) -> bool:
        """BatchNorm used batch statistics during local training (the recorded ``bn_mode`` is train)."""
        return self.meta.bn_mode == "train"

    @property
    def final_layer(self) -> str | None:
        return final_linear(self.model)

    def grad(self, name: str) -> torch.Tensor | None:
        return self.gradient.get(name)

    @property
    def output_layer(self) -> str:
        """The output layer's name; methods that need one check for it first, a direct call is refused the same way."""
        if self.final_layer is None:
            raise NotApplicable(self.no_output_layer())
        return self.final_layer

    def no_output_layer(self) -> str:
        """Why methods that read a linear output layer cannot apply, naming the layer the model ends in instead (a
        SqueezeNet's 1x1 convolution), and what to do."""
        last = [(n, type(m).__name__) for n, m in self.model.named_modules()
                if any(True for _ in m.parameters(recurse=False))]
        named = f" (it ends in {last[-1][0]}, a {last[-1][1]})" if last else ""
        return f"the model has no linear output layer{named}; give the labels with --labels-file"

    def shared_grad(self, name: str) -> torch.Tensor:
        """The averaged gradient of parameter ``name``; NotApplicable when the update withholds it."""
        value = self.grad(name)
        if value is None:
            raise NotApplicable(f"needs the gradient of {name}, which the update does not share")
        return value

    def output_grad(self, part: str) -> torch.Tensor:
        """The output layer's ``part`` ("weight" or "bias") gradient (see ``shared_grad``)."""
        return self.shared_grad(f"{self.output_layer}.{part}")

    @property
    def final_weight_grad(self) -> torch.Tensor | None:
        return self.grad(f"{self.final_layer}.weight") if self.final_layer else None

    @property
    def final_bias_grad(self) -> torch.Tensor | None:
        return self.grad(f"{self.final_layer}.bias") if self.final_layer else None

    def _changes(self, model: nn.Module):
        """(parameter of ``model``, the client's change w_local - w_global of it) for every parameter the update
        carries (``model``: the global model or a copy of it)."""
        for name, p in model.named_parameters():
            if name in self.gradient:
                yield p, client_change(self.meta, self.gradient[name].to(p.device), p)

    def model_along_update(self, fraction: float) -> nn.Module:
        """A copy of the model ``fraction`` of the way from the global to the client's final parameters (a delta or
        weights upload reveals them; withheld parameters stay where they were)."""
        model = copy.deepcopy(self.model)
        with torch.no_grad():
            for p, change in self._changes(model):
                p.add_(fraction * change.to(p.dtype))
        return model

    def relative_change(self) -> float | None:
        """|w_local - w_global| / |w_global| over the parameters the update carries (a delta or weights upload);
        None for a gradient upload, which reveals no final model."""
        if self.meta.kind == "gradient":
            return None
        moved = size = 0.0
        with torch.no_grad():
            for p, change in self._changes(self.model):
                moved += float(change.double().pow(2).sum())
                size += float(p.double().pow(2).sum())
        return (moved / size) ** 0.5 if size > 0 else None

    def models_along_update(self, fractions: list[float] | None = None) -> list[tuple[float, nn.Module]]:
        """(weight, model) for each local step's gradient: the models on the straight path to the client's final
        parameters at ``fractions`` of the way (default: where a constant gradient is under the recorded momentum),
        weighted as the averaged gradient weighs the steps (fedaudit/conversion.py). One step, or a gradient upload
        (no final model): the global model alone."""
        steps = self.meta.local_steps
        if steps == 1 or self.meta.kind == "gradient":
            return [(1.0, self.model)]
        momentum, _ = optimizer_terms(self.meta)
        weights = momentum_weights(steps, momentum)
        fractions = path_fractions(steps, momentum) if fractions is None else fractions
        if len(fractions) != steps:
            raise ValueError(f"{len(fractions)} path fractions for {steps} local steps")
        return [(w / sum(weights), self.model if f == 0 else self.model_along_update(f))
                for w, f in zip(weights, fractions)]

    @property
    def has_batchnorm(self) -> bool:
        return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in self.model.modules())


def with_batch_size(meta: UpdateMeta, batch_size: int | None, mode: str, src: str) -> UpdateMeta:
    """``meta`` with ``--batch-size`` applied: against a different recorded batch size ``mode`` "check" refuses,
    "override" replaces it, "fill" keeps the recorded one (image and text threat models alike)."""
    if batch_size is None:
        return meta
    if batch_size < 1:
        raise InputError(f"--batch-size must be >= 1, got {batch_size}")
    if batch_size > MAX_BATCH:
        raise InputError(f"--batch-size must be at most {MAX_BATCH:,}, got {batch_size}")
    contradicts = bool(meta.batch_size) and batch_size != meta.batch_size
    if contradicts and mode not in ("override", "fill"):
        raise InputError(f"--batch-size {batch_size} contradicts the batch size {meta.batch_size} that {src} "
                         f"records; pass --force to use {batch_size}")
    return meta if contradicts and mode == "fill" else dataclasses.replace(meta, batch_size=batch_size)


def load_threat_model(checkpoint_path: str | Path, update_path: str | Path, *, batch_size: int | None = None,
                      batch_size_mode: str = "check", allow_custom_arch: bool = False, allow_nonfinite: bool = False,
                      check_base: bool = True) -> ThreatModel:
    """Load and cross-check a checkpoint and a recorded update; every inconsistency is an InputError."""
    ckpt = load_checkpoint(checkpoint_path, allow_custom_arch=allow_custom_arch)
    upd = load_update(update_path)
    if check_base and upd.meta.base_checkpoint_sha256 and upd.meta.base_checkpoint_sha256 != ckpt.sha256:
        raise InputError(f"update {str(update_path)!r} was recorded against checkpoint sha256 "
                         f"{upd.meta.base_checkpoint_sha256[:12]}..., not {ckpt.sha256[:12]}... "
                         "(pass --ignore-base-mismatch to audit anyway)")
    tm = ThreatModel.from_tensors(ckpt, upd.tensors, upd.meta, update_path=upd.path, update_sha256=upd.sha256,
                                  raw_metadata=upd.raw_metadata, batch_size=batch_size,
                                  batch_size_mode=batch_size_mode, allow_nonfinite=allow_nonfinite)
    if not allow_nonfinite and all(not bool(g.any()) for g in tm.gradient.values()):  # every cosine would be 0 / 0
        raise InputError(f"update {str(update_path)!r}: every parameter's update is zero: the client uploaded no "
                         "change, so there is nothing to attack or measure")
    return tm
