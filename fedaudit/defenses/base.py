"""What a defense is: a transformation of the client's averaged gradient, applied before upload.

Defenses see the gradient of the parameters the update shares (``grads``, averaged, in the model's order) and,
for the ones that must recompute it (Soteria, Refiner), the client's own batch: the auditor plays the client,
so that batch comes from the ground-truth file and the defense says so in its record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from fedaudit.io.truth import Truth
from fedaudit.methods import Method
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


class Defense(Method):
    """A registered defense; an instance holds its options and ``info`` (what it did, for the record)."""

    needs_batch: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any] | None = None):
        self.opts = self.parse_options(options)
        self.info: dict[str, Any] = {}
        self.validate()

    def validate(self) -> None:
        """Refuse option values the defense cannot use (InputError), when it is built: before any work starts."""

    def apply(self, tm: ThreatModel, grads: dict[str, torch.Tensor], session: Session,
              batch: Truth | None) -> dict[str, torch.Tensor]:
        raise NotImplementedError


def flat(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads.values()])


def unflat(vector: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out, i = {}, 0
    for k, g in like.items():
        out[k] = vector[i:i + g.numel()].reshape(g.shape).to(g.dtype)
        i += g.numel()
    return out
