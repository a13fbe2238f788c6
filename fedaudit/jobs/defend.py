"""A defense job: a chain of registered defenses applied, in order, to a threat model's gradient.

The result is kept in memory (the audit attacks it) or written as a defended update (``fedaudit defend``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedaudit.defenses import DEFENSES
from fedaudit.defenses.chain import apply_chain, defended_meta, defended_threat_model, upload_tensors
from fedaudit.defenses.utility import relative_error
from fedaudit.errors import NotApplicable
from fedaudit.io.truth import Truth
from fedaudit.io.update import save_update
from fedaudit.methods import parse_spec
from fedaudit.report.types import DefendSummary, build
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def parse_defense(spec: str) -> tuple[str, dict[str, Any]]:
    """'prune', 'prune:0.5' (the first option), 'dp:eps=100:delta=1e-5' -> (name, options with defaults), checked
    (a value the defense cannot use is an InputError here, not when the defense runs)."""
    name, options = parse_spec(DEFENSES, spec)
    DEFENSES.get(name)(options)
    return name, options


@dataclass
class DefendResult:
    grads: dict[str, torch.Tensor]  # defended averaged gradient of every present parameter (CPU)
    records: list[dict[str, Any]]  # one per defense, in order

    def tensors(self, tm: ThreatModel) -> dict[str, torch.Tensor]:
        """What the defended upload holds: the gradients and the client's BN buffers, as they were."""
        return upload_tensors(tm, self.grads)


@dataclass
class DefendJob:
    session: Session
    tm: ThreatModel
    chain: list[tuple[str, dict[str, Any] | None]]  # (defense name, options as given)
    batch: Truth | None = None  # the client's images and labels (defenses that recompute the gradient)
    resolved: list[tuple[str, dict[str, Any]]] = field(init=False)

    def summary(self, out, result: DefendResult) -> dict[str, Any]:
        """The JSON ``fedaudit defend`` prints (fedaudit/report/types.py ``DefendSummary``)."""
        return build(DefendSummary, {"output": str(out), "defense": result.records[-1],
                                     "relative_gradient_error": self.utility(result)["relative_gradient_error"],
                                     "defenses_applied": len(self.tm.meta.defenses) + len(result.records)})

    def __post_init__(self) -> None:
        # building each defense validates its option values: a bad chain fails before any work starts
        self.resolved = [(name, DEFENSES.get(name)(options).opts) for name, options in self.chain]

    def check(self) -> None:
        for name, _ in self.resolved:
            cls = DEFENSES.get(name)
            reasons = cls.why_not(self.tm)
            if cls.needs_batch and self.batch is None:
                reasons.append("needs the client's batch (--batch TRUTH: images and labels), because it recomputes the gradient")
            if reasons:
                raise NotApplicable(f"{name}: " + "; ".join(reasons))

    def run(self) -> DefendResult:
        self.check()
        dev = self.session.device
        batch = None if self.batch is None else dataclasses.replace(
            self.batch, images=self.batch.images.to(dev), labels=self.batch.labels.to(dev))
        grads, records = apply_chain(self.tm, self.resolved, self.session, batch)
        return DefendResult(grads, records)

    def defended_threat_model(self, result: DefendResult) -> ThreatModel:
        """What a server receiving the defended upload would see."""
        return defended_threat_model(self.tm, result.grads, result.records)

    def utility(self, result: DefendResult) -> dict[str, float]:
        """How far the upload moved: relative error and cosine to the true gradient."""
        return relative_error({k: self.tm.gradient[k] for k in self.tm.present}, result.grads)

    def write(self, path: str | Path, result: DefendResult) -> Path:
        return save_update(path, result.tensors(self.tm), defended_meta(self.tm.meta, result.records))
