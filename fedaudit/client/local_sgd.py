"""A client's local training: plain or heavy-ball SGD on the cross-entropy of a sequence of batches.

Written once for the places that run it: ``capture`` (record a FedAvg upload from real images or text lines:
``sgd_steps`` takes any loss) and label methods that simulate a client on auxiliary images (RLU's
``--trajectory progress``, fedaudit/labels/rlu.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from fedaudit.errors import InputError
from fedaudit.models import ModelSpec
from fedaudit.models.normalize import normalize


def client_loss(model: nn.Module, spec: ModelSpec, x: torch.Tensor, y: torch.Tensor, reduction: str = "mean",
                normalized: bool = False) -> torch.Tensor:
    """The client's cross-entropy on images ``x`` in [0, 1] (``normalized``: already normalised)."""
    try:
        return F.cross_entropy(model(x if normalized else normalize(x, spec)), y, reduction=reduction)
    except ValueError as exc:  # BatchNorm in train mode on a 1x1 feature map with batch 1
        raise InputError(f"the client forward failed: {exc} (try --bn-mode eval)") from None


def client_optimizer(model: nn.Module, lr: float, momentum: float = 0.0, weight_decay: float = 0.0) -> torch.optim.SGD:
    """The client's optimiser: torch's SGD (heavy-ball ``momentum``, no dampening; ``weight_decay``) on the model's
    trainable parameters. ``sgd_steps`` trains with it; the server's replay of a text round steps with it too
    (fedaudit/attacks/text/local_replay.py)."""
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr, momentum=momentum,
                           weight_decay=weight_decay)


def sgd_steps(model: nn.Module, losses: Iterable[Callable[[], torch.Tensor]], lr: float, momentum: float = 0.0,
              weight_decay: float = 0.0, before_step: Callable[[int, nn.Module], None] | None = None) -> nn.Module:
    """Train ``model``'s trainable parameters in place, one torch SGD step per loss (each a closure computing the
    step's loss at the current weights); ``before_step(k, model)`` sees the model each step's gradient is taken at.
    Returns the model (its parameters' ``.grad`` hold the last step's gradient)."""
    opt = client_optimizer(model, lr, momentum, weight_decay)
    for k, loss in enumerate(losses):
        if before_step is not None:
            before_step(k, model)
        opt.zero_grad()
        loss().backward()
        opt.step()
    return model


def local_sgd(model: nn.Module, spec: ModelSpec, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], lr: float,
              momentum: float = 0.0, weight_decay: float = 0.0, normalized: bool = False,
              before_step: Callable[[int, nn.Module], None] | None = None) -> nn.Module:
    """Train ``model`` in place, one torch SGD step per image batch (mean-reduced cross-entropy), as a FedAvg client
    does (``sgd_steps``). Returns the model."""
    losses = (functools.partial(client_loss, model, spec, x, y, "mean", normalized) for x, y in batches)
    return sgd_steps(model, losses, lr, momentum, weight_decay, before_step)
