"""A defense job: a chain of registered defenses applied, in order, to a threat model's gradient.

The result is kept in memory (the audit attacks it) or written as a defended update (``fedaudit defend``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedaudit.defenses import DEFENSES
from fedaudit.defenses.utility import relative_error
from fedaudit.errors import NotApplicable
from fedaudit.io.truth import Truth
from fedaudit.io.update import UpdateMeta, save_update
from fedaudit.methods import parse_spec
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def parse_defense(spec: str) -> tuple[str, dict[str, Any]]:
    """'prune', 'prune:0.5' (the first option), 'dp:eps=100:delta=1e-5' -> (name, options with defaults), checked
    (a value the defense cannot use is an InputError here, not when the defense runs)."""
    name, options = parse_spec(DEFENSES, spec)
    DEFENSES.get(name)(options)
    return name, options


def defended_meta(meta: UpdateMeta, records: list[dict]) -> UpdateMeta:
    """The defended upload is an averaged gradient (mean reduction); everything else the client reported stays."""
    return dataclasses.replace(meta, kind="gradient", reduction="mean", delta_sign=None,
                               optimizer={"name": "sgd", "momentum": 0.0, "weight_decay": 0.0},
                               defenses=list(meta.defenses) + records)


@dataclass
class DefendResult:
    grads: dict[str, torch.Tensor]  # defended averaged gradient of every present parameter (CPU)
    records: list[dict[str, Any]]  # one per defense, in order

    def tensors(self, tm: ThreatModel) -> dict[str, torch.Tensor]:
        """What the defended upload holds: the gradients and the client's BN buffers, as they were."""
        out = {k: v.detach().float().contiguous() for k, v in self.grads.items()}
        out.update(tm.client_buffers)
        return out


@dataclass
class DefendJob:
    session: Session
    tm: ThreatModel
    chain: list[tuple[str, dict[str, Any] | None]]  # (defense name, options as given)
    batch: Truth | None = None  # the client's images and labels (defenses that recompute the gradient)
    resolved: list[tuple[str, dict[str, Any]]] = field(init=False)

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
        grads = {k: self.tm.gradient[k].clone() for k in self.tm.present}
        records = []
        for name, options in self.resolved:
            cls = DEFENSES.get(name)
            d = cls(options)
            t0 = time.perf_counter()
            grads = {k: v.cpu() for k, v in d.apply(self.tm, grads, self.session, batch).items()}
            records.append({"name": name, "options": options, "info": d.info, "seconds": round(time.perf_counter() - t0, 4),
                            "used_client_batch": cls.needs_batch})
        return DefendResult(grads, records)

    def defended_threat_model(self, result: DefendResult) -> ThreatModel:
        """What a server receiving the defended upload would see."""
        if not result.records:
            return self.tm
        tm = self.tm
        return ThreatModel.from_tensors(tm.checkpoint, result.tensors(tm), defended_meta(tm.meta, result.records),
                                        update_path=tm.update.path, update_sha256=tm.update.sha256,
                                        allow_nonfinite=True)

    def utility(self, result: DefendResult) -> dict[str, float]:
        """How far the upload moved: relative error and cosine to the true gradient."""
        return relative_error({k: self.tm.gradient[k] for k in self.tm.present}, result.grads)

    def write(self, path: str | Path, result: DefendResult) -> Path:
        return save_update(path, result.tensors(self.tm), defended_meta(self.tm.meta, result.records))
