"""The server's view of a language-model update: the checkpoint folder, the recorded update and what it shares,
cross-checked as image updates are (fedaudit/threat_model.py): every mismatch is one InputError line (exit 2)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fedaudit.conversion import local_minus_global, optimizer_terms, to_average_gradient
from fedaudit.errors import InputError
from fedaudit.io.text_adapter import load_text_model
from fedaudit.io.text_checkpoint import LORA_PARTS, TextCheckpoint
from fedaudit.io.update import RecordedUpdate, UpdateMeta, check_update_tensors, load_update
from fedaudit.models.text_families import FAMILIES
from fedaudit.threat_model import with_batch_size


@dataclass
class LocalRound:
    """What a delta reveals of the client's local round: K SGD steps on successive batches of B lines (``examples``
    lines in all, cycling; None when not recorded) at ``lr`` with the recorded momentum and weight decay, and the
    change itself (w_local - w_global, by parameter, as recorded)."""

    steps: int
    lr: float
    momentum: float
    weight_decay: float
    examples: int | None
    change: dict[str, torch.Tensor]

    @classmethod
    def of(cls, meta: UpdateMeta, change: dict[str, torch.Tensor]) -> "LocalRound":
        """The round a delta's metadata records (its optimiser's momentum and weight decay checked as the gradient
        conversion checks them), with its ``change``."""
        momentum, wd = optimizer_terms(meta)
        return cls(meta.local_steps, float(meta.local_lr or 0.0), momentum, wd, meta.num_examples, change)

    def on(self, device: torch.device | str) -> LocalRound:
        """The round with its change on ``device``."""
        return dataclasses.replace(self, change={k: v.to(device) for k, v in self.change.items()})

    def rows(self, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The change without its weight decay, in float64: what holds the steps' inputs in its rows (weight decay
        adds a multiple of the whole weight matrix, of full rank). Heavy-ball SGD with weight decay is linear in the
        weights and the gradients, so the change splits exactly into the part the gradients drive (the steps'
        inputs in its rows) and ``(a_K - 1) * w_0``, where a_K is the same recursion run on w_0 alone with no
        gradient (torch's SGD: ``v <- mu v + g + wd w``, ``w <- w - lr v``, v = 0 at the start). ``weights``: the
        global model's parameters by name."""
        if not self.weight_decay:
            return self.change
        a, v = 1.0, 0.0
        for _ in range(self.steps):
            v = self.momentum * v + self.weight_decay * a
            a -= self.lr * v
        return {k: d.to(torch.float64) - (a - 1.0) * weights[k].detach().to(torch.float64)
                for k, d in self.change.items()}


@dataclass
class TextThreatModel:
    checkpoint: TextCheckpoint
    update: RecordedUpdate
    gradient: dict[str, torch.Tensor]  # the mean gradient (FedSGD) or the delta's pseudo-gradient, by parameter
    local: LocalRound | None  # a delta's or weights upload's local round (None for a gradient)
    present: list[str]
    absent: list[str]
    nonfinite: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def meta(self):
        return self.update.meta

    def on(self, device: torch.device | str) -> TextThreatModel:
        """The model, the gradient and a delta's change moved to ``device`` (in place): a text attack runs where its
        model is, and makes its own tensors there (tests/test_text_device.py)."""
        self.checkpoint.model.to(device)
        self.gradient = {k: v.to(device) for k, v in self.gradient.items()}
        if self.local is not None:
            self.local = self.local.on(device)
        return self

    @property
    def batch_size(self) -> int | None:
        return self.update.meta.batch_size

    @property
    def lines(self) -> int | None:
        """How many distinct lines the update can hold: B, or a delta's K batches of B (fewer where the round
        cycles over its ``num_examples`` lines); None without the batch size."""
        return lines_in_round(self.batch_size, self.meta.local_steps, self.meta.num_examples)


def shown_length(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor]) -> int | None:
    """The batch's padded length as the position embedding's gradient shows it: its last non-zero row plus one for
    an encoder (every position of a classifier's line has a gradient), plus two for a decoder (the last position
    predicts nothing and has none of its own); None where that gradient is withheld or zero."""
    name = FAMILIES[ckpt.model_type].positions
    g = gradients.get(name) if name else None  # rotary positions (LLaMA) have no such embedding
    rows = torch.nonzero(g.abs().sum(dim=1) > 0).flatten() if g is not None else None
    if rows is None or not len(rows):
        return None
    return min(int(rows.max()) + (1 if ckpt.kind == "encoder" else 2), ckpt.positions)


def lines_in_round(batch_size: int | None, steps: int, examples: int | None) -> int | None:
    """B x K, or the round's ``examples`` where it cycles over fewer (each step takes the next B lines)."""
    if not batch_size:
        return None
    return batch_size * min(steps, max(1, examples // batch_size)) if examples else batch_size * steps


def load_text_threat_model(checkpoint_path: str | Path, update_path: str | Path, *, base: str | Path | None = None,
                           batch_size: int | None = None, batch_size_mode: str = "check", check_base: bool = True,
                           allow_nonfinite: bool = False) -> TextThreatModel:
    """Load a language-model folder (or a LoRA adapter folder on ``base``) and a recorded update of it; refuse an
    update of another model (a recorded base hash that differs, a tensor the model lacks or shapes otherwise), NaN/Inf,
    an all-zero upload. An adapter's update is keyed as PEFT saves adapters; it is read by the model's names."""
    ckpt = load_text_model(checkpoint_path, base)
    upd = load_update(update_path)
    src = f"update {str(update_path)!r}"
    upd = dataclasses.replace(upd, meta=with_batch_size(upd.meta, batch_size, batch_size_mode, src))
    lora = [k for k in upd.tensors if any(m in k for m in LORA_PARTS)]
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
    nonfinite = check_update_tensors(upd.tensors, params, src, f"a parameter of the {ckpt.model_type} model in "
                                     f"{ckpt.source!r}", " (an update of another model?)", allow_nonfinite)
    present = [k for k in params if k in upd.tensors]
    absent = [k for k in params if k not in upd.tensors]
    raw = {k: upd.tensors[k] for k in present if k not in nonfinite}
    gradient = to_average_gradient(upd.meta, raw, {k: params[k].detach() for k in raw})
    if not allow_nonfinite and not any(bool(g.any()) for g in gradient.values()):
        raise InputError(f"{src}: every parameter's update is zero: the client uploaded no change")
    local = None
    if upd.meta.kind != "gradient":
        local = LocalRound.of(upd.meta, {k: local_minus_global(upd.meta, v, params[k].detach().to(v.dtype))
                                         for k, v in raw.items()})
    tm = TextThreatModel(ckpt, upd, gradient, local, present, absent, nonfinite)
    if upd.meta.batch_size is None:
        tm.warnings.append("the update does not record fedaudit.batch_size: DAGER cannot tell a consistent search "
                           "(at most B sequences) from one that let too much through")
    p = dropout_rate(ckpt.model)
    if p and not captured_in_eval(upd.meta):
        tm.warnings.append(DROPOUT_WARNING.format(p=p))
    return tm


# issue 90: a LoRA step recorded in train mode (GPT-2's default dropout 0.1) gave "0 sequences recovered" and "low";
# the same batch in eval mode gave every line exactly
DROPOUT_WARNING = ("the model has dropout (p = {p:g}): if the client trained in train mode (the default of a "
                   "training loop), each forward dropped a random share of its activations, which breaks DAGER's "
                   "exact span checks; record the update with model.eval(), or read it with an approximate attack "
                   "(reconstruct tag)")


def captured_in_eval(meta) -> bool:
    """Whether fedaudit's own text capture recorded the update: it runs the model in eval mode (dropout off)."""
    source = meta.source if isinstance(meta.source, dict) else {}
    return str(source.get("tool", "")).startswith("fedaudit") and "framework" not in source


def dropout_rate(model: torch.nn.Module) -> float:
    """The largest dropout probability of the model's dropout layers (0 without any)."""
    return max((float(m.p) for m in model.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd)),
               default=0.0)
