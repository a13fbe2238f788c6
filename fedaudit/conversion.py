"""Update -> averaged gradient ``g_hat``, by the metadata's kind, sign and scale (never guessed).

* gradient: as is (``reduction=sum`` is divided by the batch size).
* delta: ``Delta = w_local - w_global`` (the sign is flipped for ``global_minus_local``, TFF's convention).
* weights: ``Delta = w_client - w_global`` (the checkpoint is subtracted first).

For plain SGD with K steps at lr eta, ``Delta = -eta * sum_k g_k``, so ``g_hat = -Delta / (eta K)`` is the
mean of the per-step batch gradients (exact for K = 1; each g_k is taken at a different iterate otherwise).
With heavy-ball momentum mu (PyTorch SGD, dampening 0) step j's gradient enters with weight
``c_j = (1 - mu^(K-j)) / (1 - mu)``; we divide by ``eta * sum_j c_j`` so g_hat stays a weighted *mean*
gradient. Weight decay lambda adds ``lambda * w_k`` to each g_k; we subtract ``lambda * w_0`` (first order).
Nesterov and adaptive optimisers have no linear map and are refused.
"""

from __future__ import annotations

import torch

from fedaudit.errors import InputError
from fedaudit.io.update import UpdateMeta


def momentum_weights(steps: int, momentum: float) -> list[float]:
    """c_j for j = 0..K-1 (ecosystem.md section 1.4)."""
    if momentum == 0:
        return [1.0] * steps
    return [(1 - momentum ** (steps - j)) / (1 - momentum) for j in range(steps)]


def optimizer_terms(meta: UpdateMeta) -> tuple[float, float]:
    """(momentum, weight decay) of the recorded plain or heavy-ball SGD; other optimisers are refused."""
    opt = meta.optimizer or {}
    name = str(opt.get("name", "sgd")).lower()
    if name != "sgd" or opt.get("nesterov"):
        raise InputError(f"cannot convert a {name}{' (nesterov)' if opt.get('nesterov') else ''} update to a gradient: "
                         "only plain or heavy-ball SGD has a linear map")
    try:
        momentum = float(opt.get("momentum", 0.0) or 0.0)
        wd = float(opt.get("weight_decay", 0.0) or 0.0)
    except (TypeError, ValueError):
        raise InputError("metadata fedaudit.optimizer has a non-numeric momentum or weight_decay") from None
    if not 0 <= momentum < 1 or wd < 0:
        raise InputError(f"metadata fedaudit.optimizer has momentum={momentum}, weight_decay={wd}; need 0<=momentum<1, wd>=0")
    return momentum, wd


def local_minus_global(meta: UpdateMeta, raw: torch.Tensor, global_value: torch.Tensor) -> torch.Tensor:
    """The client's change ``w_local - w_global`` for a delta or weights update."""
    if meta.kind == "weights":
        return raw - global_value
    return raw if meta.delta_sign == "local_minus_global" else -raw


def gradient_scale(meta: UpdateMeta) -> float:
    """The factor s with ``g_hat = -Delta / s`` (``eta * sum_j c_j``)."""
    momentum, _ = optimizer_terms(meta)
    if meta.local_lr is None:
        raise InputError(f"a {meta.kind} update needs fedaudit.local_lr to become a gradient")
    return float(meta.local_lr) * sum(momentum_weights(meta.local_steps, momentum))


def to_average_gradient(meta: UpdateMeta, raw: dict[str, torch.Tensor], global_params: dict[str, torch.Tensor]
                        ) -> dict[str, torch.Tensor]:
    """Averaged (mean-reduced) gradient for every parameter present in ``raw``."""
    if meta.kind == "gradient":
        if meta.reduction == "sum":
            if not meta.batch_size:
                raise InputError("a reduction=sum gradient needs fedaudit.batch_size to become a mean gradient")
            return {k: v.float() / meta.batch_size for k, v in raw.items()}
        return {k: v.float() for k, v in raw.items()}
    _, wd = optimizer_terms(meta)
    scale = gradient_scale(meta)
    out = {}
    for k, v in raw.items():
        w0 = global_params[k].float()
        g = -local_minus_global(meta, v.float(), w0) / scale
        out[k] = g - wd * w0 if wd else g
    return out


def path_fractions(steps: int, momentum: float) -> list[float]:
    """Where step k's gradient is taken, for k = 0..K-1, as the fraction of the client's whole change Delta it has
    travelled when every step's gradient is the same: after k heavy-ball steps the displacement is
    ``sum_{i=1..k} (1 - mu^i) / (1 - mu)`` gradients, and after K it is ``sum_j c_j`` (plain SGD: k / K)."""
    reach = [sum((1 - momentum ** i) / (1 - momentum) if momentum else 1.0 for i in range(1, k + 1))
             for k in range(steps + 1)]
    return [r / reach[-1] for r in reach[:-1]]


def client_change(meta: UpdateMeta, gradient: torch.Tensor, global_value: torch.Tensor) -> torch.Tensor:
    """``w_local - w_global`` back from the averaged gradient of a delta or weights update (the inverse of
    ``to_average_gradient``, weight decay included)."""
    _, wd = optimizer_terms(meta)
    return -gradient_scale(meta) * (gradient + wd * global_value.float())
