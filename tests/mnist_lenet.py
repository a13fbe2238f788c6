"""The MNIST DLG LeNet the label tests share: the digits split, the server's view of an update, a trained copy."""

from __future__ import annotations

import torch

from fedaudit.client.capture import capture_update
from fedaudit.data.offline import MNIST_MEAN, MNIST_STD, mnist_digits
from fedaudit.io.checkpoint import Checkpoint
from fedaudit.jobs import Aux
from fedaudit.models import ModelSpec, build_model
from fedaudit.models.normalize import normalize
from fedaudit.threat_model import ThreatModel

SPEC = ModelSpec("lenet", 10, (1, 32, 32), MNIST_MEAN, MNIST_STD, {})  # DLG's LeNet: sigmoid, U(-0.5, 0.5) init


def digit_split():
    """Victim pool (4,000 digits of a seeded shuffle) and 50 aux digits per class from the rest, never both."""
    x, y = mnist_digits(pad_to=32)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    rest = torch.arange(4000, len(y))
    aux_idx = torch.cat([rest[y[rest] == c][:50] for c in range(10)])
    return x[:4000], y[:4000], Aux(x[aux_idx], y[aux_idx], "images")


def server_view(x, y, cfg, seed=0, model=None, spec: ModelSpec = SPEC) -> ThreatModel:
    """The server's view of ``model``'s update on (x, y); without a model, a fresh ``spec`` model (the DLG LeNet)
    from ``seed``."""
    if model is None:
        torch.manual_seed(seed)
        model = build_model(spec)
    cap = capture_update(model, spec, x, y, cfg)
    return ThreatModel.from_tensors(Checkpoint.in_memory(spec, model), cap.tensors, cap.meta)


def trained_lenet(x, y, lr: float, epochs: int):
    """A DLG LeNet (seed 0) trained with Adam on digits 2000-3999, which the victims (drawn from 0-1999) never are."""
    torch.manual_seed(0)
    model = build_model(SPEC)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        for i in range(2000, 4000, 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(normalize(x[i:i + 64], SPEC)), y[i:i + 64]).backward()
            opt.step()
    return model.eval()
