"""What every label-recovery method shares: its result, its inputs beyond the ThreatModel, its options.

Notation (shared/specs/gdbr.md): B batch size, C classes, G = dL/dW of the output layer (C x M, mean-reduced
cross-entropy), gb = dL/db of the output layer, g_i = sum_m G[i, m] (row sums).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from fedaudit.errors import InputError, NotApplicable
from fedaudit.methods import Method
from fedaudit.requirements import BATCH_SIZE, unmet
from fedaudit.threat_model import ThreatModel


@dataclass(frozen=True)
class MethodOption:
    """A method-specific option; the CLI turns each into ``--name`` on that method's subcommand."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None


@dataclass
class Aux:
    """Auxiliary inputs the server holds (public images, or Gaussian dummies); labels when known."""

    images: torch.Tensor  # [N, C, H, W] in [0,1] (dummies: N(0,1) in normalised space, already normalised)
    labels: torch.Tensor | None
    kind: str  # "images" | "dummy"
    normalized: bool = False  # dummies are drawn directly in the network's input space


@dataclass
class LabelContext:
    aux: Aux | None = None
    seed: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    options: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None  # --batch-size override when the metadata lacks it

    def opt(self, name: str):
        return self.options[name]


@dataclass
class LabelResult:
    counts: torch.Tensor  # float [C]: the method's raw per-class estimate (0/1 for set-only methods)
    counts_int: torch.Tensor  # int64 [C]: integer counts
    diagnostics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def labels(self) -> list[int]:
        """Per-sample labels, sorted by class (the order of the batch is not recoverable)."""
        return [c for c, n in enumerate(self.counts_int.tolist()) for _ in range(n)]


class LabelMethod(Method):
    """A registered label-recovery method. ``counts_capable`` methods estimate how many samples carry each
    class (duplicates, B > C); the others recover which classes are present."""

    counts_capable: ClassVar[bool] = True
    aux: ClassVar[str] = "none"  # "none" | "optional" (aux or --dummy) | "required" | "labelled" (aux with labels)
    options: ClassVar[tuple[MethodOption, ...]] = ()

    @classmethod
    def why_not(cls, tm: ThreatModel, ctx: LabelContext | None = None) -> list[str]:
        needs = [r for r in cls.requires if not (r is BATCH_SIZE and ctx is not None and ctx.batch_size)]
        reasons = unmet(needs, tm)
        if ctx is not None:
            if cls.aux in ("required", "labelled") and (ctx.aux is None or ctx.aux.kind != "images"):
                reasons.append(f"needs auxiliary images (--aux){' with labels' if cls.aux == 'labelled' else ''}")
            elif cls.aux == "optional" and ctx.aux is None:
                reasons.append("needs auxiliary images (--aux) or Gaussian dummies (--dummy)")
            elif cls.aux == "labelled" and ctx.aux is not None and ctx.aux.labels is None:
                reasons.append("needs labelled auxiliary images (--aux-labels, or a 'labels' tensor)")
        return reasons

    @classmethod
    def check_applicable(cls, tm: ThreatModel, ctx: LabelContext | None = None) -> None:
        reasons = cls.why_not(tm, ctx)
        if reasons:
            raise NotApplicable(f"{cls.name}: " + "; ".join(reasons))

    def run(self, tm: ThreatModel, ctx: LabelContext) -> LabelResult:
        raise NotImplementedError


def samples_in_update(tm: ThreatModel, ctx: LabelContext) -> int:
    """How many per-sample gradients the averaged gradient mixes: B for FedSGD, B*K for K local steps
    (each step's batch gradient is one term of g_hat; see fedaudit/conversion.py)."""
    batch = ctx.batch_size or tm.batch_size
    if not batch:
        raise InputError("the update does not record fedaudit.batch_size; pass --batch-size")
    return batch * tm.meta.local_steps


def integer_counts(raw: torch.Tensor, total: int) -> torch.Tensor:
    """Project float counts onto non-negative integers summing to ``total``.

    Rule (shared/specs/gdbr.md section 7.1, ZLG style): clip at 0, floor, then give the remaining samples to
    the largest fractional parts; if the floors already exceed ``total``, take samples back from the classes
    whose floor overshoots their raw value the least (smallest fractional part first). The raw floats are
    always reported beside the integers.
    """
    r = raw.double().clamp_min(0)
    if not torch.isfinite(r).all():
        raise ValueError("label counts are not finite")
    if float(r.sum()) == 0:
        r = torch.ones_like(r)  # nothing to go on: spread evenly rather than return an empty batch
        r = r * total / r.sum()
    base = torch.floor(r)
    frac = r - base
    out = base.long()
    deficit = total - int(out.sum())
    if deficit > 0:
        order = torch.argsort(frac, descending=True, stable=True)
        for k in range(deficit):
            out[order[k % len(order)]] += 1
    while deficit < 0:
        candidates = torch.nonzero(out > 0).flatten()
        i = candidates[torch.argmin(frac[candidates])]
        out[i] -= 1
        frac[i] = math.inf if out[i] == 0 else frac[i] + 1
        deficit += 1
    return out


def set_result(present: torch.Tensor, num_classes: int, **diagnostics) -> LabelResult:
    """Result of a set-only method: each recovered class counted once."""
    counts = torch.zeros(num_classes)
    counts[present] = 1.0
    return LabelResult(counts, counts.long(), diagnostics)


def list_result(labels: list[int], num_classes: int, **diagnostics) -> LabelResult:
    counts = torch.bincount(torch.tensor(labels, dtype=torch.long), minlength=num_classes)
    return LabelResult(counts.double(), counts, diagnostics)
