"""A plain PyTorch save as a recorded update: ``{name: param.grad}`` or ``new_state - old_state`` written with
``safetensors.torch.save_file`` by a reviewer's own training loop or Flower client, without fedaudit's metadata
(``fedaudit import update``; docs/usage.md, "Your own training loop's saves").

The names must be the checkpoint model's (``model.state_dict()`` keys; a ``module.`` prefix from DataParallel or DDP
is taken off); a tensor the model lacks, a shape that differs, a non-float parameter or a NaN is one clear error, by
the checks every recorded update passes (``check_update_tensors``).
Tensors the save leaves out are withheld (the attacks match what is present). The recipe the file cannot carry
(what the tensors are, B, K, the learning rate) comes from the command line, and what is missing is named.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors
from fedaudit.io.update import UpdateMeta, check_update_tensors

PREFIXES = ("module.", "_orig_mod.")  # DataParallel / DDP, torch.compile


def named_tensors(path: str | Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """The save's tensors under the model's names, checked against the model's state_dict."""
    tensors, _ = read_safetensors(path, "update")
    if not tensors:
        raise InputError(f"update {str(path)!r} holds no tensors")
    for prefix in PREFIXES:
        if all(k.startswith(prefix) for k in tensors):
            tensors = {k[len(prefix):]: v for k, v in tensors.items()}
    ref = model.state_dict()
    # the checks every recorded update's tensors pass (fedaudit/io/update.py): a name the model lacks, another shape,
    # integers where the model holds floats, NaN/Inf or entries too large to compute with
    check_update_tensors(tensors, ref, f"update {str(path)!r}", "in the checkpoint's model",
                         f" (its names look like {next(iter(ref))!r}: was it saved from another architecture?)")
    out = {k: t.to(ref[k].dtype) if ref[k].is_floating_point() else t for k, t in tensors.items()}
    params = dict(model.named_parameters())
    if not any(k in params and ref[k].is_floating_point() for k in out):
        raise InputError(f"update {str(path)!r} holds no parameter of the model (buffers only)")
    return out


def plain_update(path: str | Path, model: nn.Module, base_sha256: str | None, *, kind: str,
                 batch_size: int | None, local_steps: int = 1, lr: float | None = None,
                 delta_sign: str = "local_minus_global", reduction: str = "mean", bn_mode: str | None = None,
                 momentum: float = 0.0, weight_decay: float = 0.0) -> tuple[dict[str, torch.Tensor], UpdateMeta]:
    """(tensors, UpdateMeta) of a plain save with the recipe given on the command line."""
    if kind in ("delta", "weights") and lr is None:
        raise InputError(f"a {kind} needs the client's learning rate: pass --lr (and -k, the local steps it ran)")
    if kind == "gradient" and local_steps != 1:
        raise InputError("a gradient is one step: -k applies to a delta or weights")
    if batch_size is None:
        raise InputError("pass -b, the images per local step: the label methods and attacks need the batch size")
    tensors = named_tensors(path, model)
    meta = UpdateMeta(
        kind=kind, delta_sign=delta_sign if kind == "delta" else None,
        reduction=reduction if kind == "gradient" else None, batch_size=batch_size, local_steps=local_steps,
        local_lr=lr if kind != "gradient" else None, num_examples=None, bn_mode=bn_mode,
        base_checkpoint_sha256=base_sha256, optimizer={"name": "sgd", "momentum": momentum, "weight_decay": weight_decay},
        source={"framework": "pytorch", "format": "safetensors", "file": Path(path).name},
    )
    return tensors, meta
