"""What every label-recovery method shares: its result, its inputs beyond the ThreatModel, its options.

Notation (docs/methods/labels.md): B batch size, C classes, G = dL/dW of the output layer (C x M, mean-reduced
cross-entropy), gb = dL/db of the output layer, g_i = sum_m G[i, m] (row sums).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from fedaudit.errors import InputError, NotApplicable
from fedaudit.methods import Method
from fedaudit.requirements import unmet
from fedaudit.session import Aux, Session
from fedaudit.threat_model import ThreatModel


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
    class (duplicates, B > C); the others recover which classes are present. An instance holds its options;
    ``run`` reads the aux data and the seed from the session."""

    counts_capable: ClassVar[bool] = True
    aux: ClassVar[str] = "none"  # "none" | "optional" (aux or --dummy) | "required" | "labelled" (labelled aux or --dummy)
    # facts ``auto`` and the label job read about a method (fedaudit/labels/auto_routes/):
    # it models K > 1 local steps (else a K-step reading is flagged approximate)
    multi_step_aware: ClassVar[bool] = False
    # its place in the rules' preference (auto_routes/rules.py): (at random init, on a trained-like model); None: not a rule
    rules_rank: ClassVar[tuple[int | None, int | None]] = (None, None)
    # its place among the members of the ensemble of count vectors on FedAvg deltas (auto_routes/delta.py); None: not one
    ensemble_rank: ClassVar[int | None] = None

    def __init__(self, options: Mapping[str, Any] | None = None):
        self.opts = self.parse_options(options)

    def opt(self, name: str) -> Any:
        return self.opts[name]

    @staticmethod
    def aux_of(session: Session) -> Aux:
        """The session's aux data (methods that take it are checked for it before they run)."""
        if session.aux is None:
            raise NotApplicable("needs auxiliary images (--aux) or Gaussian dummies (--dummy)")
        return session.aux

    @classmethod
    def why_not(cls, tm: ThreatModel, session: Session | None = None) -> list[str]:
        reasons = unmet(cls.requires, tm)
        if session is not None:
            aux = session.aux
            if cls.aux == "required" and (aux is None or aux.kind != "images"):
                reasons.append("needs auxiliary images (--aux)")
            elif cls.aux == "labelled" and aux is None:  # dummies are labelled round-robin (LLG*-style)
                reasons.append("needs labelled auxiliary images (--aux with labels) or Gaussian dummies (--dummy)")
            elif cls.aux == "optional" and aux is None:
                reasons.append("needs auxiliary images (--aux) or Gaussian dummies (--dummy)")
            elif cls.aux == "labelled" and aux is not None and aux.labels is None:
                reasons.append("needs labelled auxiliary images (--aux-labels, or a 'labels' tensor)")
        return reasons

    @classmethod
    def check_applicable(cls, tm: ThreatModel, session: Session | None = None) -> None:
        reasons = cls.why_not(tm, session)
        if reasons:
            raise NotApplicable(f"{cls.name}: " + "; ".join(reasons))

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        raise NotImplementedError


def samples_in_update(tm: ThreatModel) -> int:
    """How many per-sample gradients the averaged gradient mixes: B for FedSGD, B*K for K local steps
    (each step's batch gradient is one term of g_hat; see fedaudit/conversion.py)."""
    if not tm.batch_size:
        raise InputError("the update does not record fedaudit.batch_size; pass --batch-size")
    return tm.batch_size * tm.meta.local_steps


def affine_rows(a: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """Rows of coordinates ``a`` in an update's row space V moved along ``last`` (V's row for an appended 1: the
    input of a layer with bias) so that each vector's appended coordinate is exactly 1 (sample-split, hidden-split)."""
    return a + ((1 - a @ last) / (last @ last))[..., None] * last


def integer_counts(raw: torch.Tensor, total: int) -> torch.Tensor:
    """Project float counts onto non-negative integers summing to ``total``.

    Rule (ZLG style; docs/methods/labels.md): clip at 0, floor, then give the remaining samples to
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
    counts = torch.zeros(num_classes, device="cpu")
    counts[present] = 1.0
    return LabelResult(counts, counts.long(), diagnostics)


def list_result(labels: list[int], num_classes: int, **diagnostics) -> LabelResult:
    counts = torch.bincount(torch.as_tensor(labels, dtype=torch.long, device="cpu"), minlength=num_classes)
    return LabelResult(counts.double(), counts, diagnostics)
