"""Content digests of tensors and of a model's state, to key results that depend only on them (label methods'
aux-data calibrations that a round's clients share)."""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import nn


def tensors_digest(tensors, into: Any = None) -> str:
    """A BLAKE2b digest of each tensor's dtype, shape and bytes, in order (CPU copies only where needed)."""
    h = into if into is not None else hashlib.blake2b(digest_size=16)
    for t in tensors:
        t = t.detach()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():
            flat = t.contiguous().cpu().reshape(-1)
            h.update(flat.view(torch.uint8).numpy().data)  # any dtype's bytes (bfloat16 included)
    return h.hexdigest()


def state_digest(model: nn.Module) -> str:
    """The digest of a model's parameters and buffers, with their names and its mode."""
    named = [*model.named_parameters(), *model.named_buffers()]
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((type(model).__name__, model.training, [n for n, _ in named])).encode())
    return tensors_digest([t for _, t in named], into=h)


def named_digest(state: dict[str, torch.Tensor]) -> str:
    """The digest of a state's tensors in the order of their names: what a model sent and a model received are compared
    by (fedaudit/integrations/flower.py records it, fedaudit/scan/round.py reads it)."""
    return tensors_digest([state[k] for k in sorted(state)])
