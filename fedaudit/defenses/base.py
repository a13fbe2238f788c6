"""What a defense is: a transformation of the client's averaged gradient, applied before upload.

Defenses see the gradient of the parameters the update shares (``grads``, averaged, in the model's order) and,
for the ones that must recompute it (Soteria, Refiner), the client's own batch: the auditor plays the client,
so that batch comes from the ground-truth file and the defense says so in its record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from fedaudit.io.truth import Truth
from fedaudit.labels.base import MethodOption
from fedaudit.methods import Method
from fedaudit.threat_model import ThreatModel


@dataclass
class DefenseContext:
    batch: Truth | None = None  # the client's images and labels (Soteria, Refiner)
    seed: int = 0
    device: str = "cpu"
    files: dict[str, str] = field(default_factory=dict)


class Defense(Method):
    options: ClassVar[tuple[MethodOption, ...]] = ()
    needs_batch: ClassVar[bool] = False

    def __init__(self, options: dict[str, Any]):
        self.options = options
        self.info: dict[str, Any] = {}

    @classmethod
    def why_not_ctx(cls, tm: ThreatModel, ctx: DefenseContext) -> list[str]:
        reasons = cls.why_not(tm)
        if cls.needs_batch and ctx.batch is None:
            reasons.append("needs the client's batch (--batch TRUTH: images and labels), because it recomputes the gradient")
        return reasons

    def apply(self, tm: ThreatModel, grads: dict[str, torch.Tensor], ctx: DefenseContext) -> dict[str, torch.Tensor]:
        raise NotImplementedError


def flat(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads.values()])


def unflat(vector: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out, i = {}, 0
    for k, g in like.items():
        out[k] = vector[i:i + g.numel()].reshape(g.shape).to(g.dtype)
        i += g.numel()
    return out
