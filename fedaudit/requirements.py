"""What a label method or attack needs from the ThreatModel, checked before it runs.

Each requirement answers ``None`` when met, or the reason it is not, which the CLI prints as
"not applicable: <why>" (exit 2) instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fedaudit.threat_model import ThreatModel


@dataclass(frozen=True)
class Requirement:
    key: str
    description: str
    check: Callable[[ThreatModel], str | None]

    def why_not(self, tm: ThreatModel) -> str | None:
        return self.check(tm)


def _final(tm: ThreatModel, part: str) -> str | None:
    if tm.final_layer is None:
        return tm.no_output_layer()
    name = f"{tm.final_layer}.{part}"
    if name not in dict(tm.model.named_parameters()):
        return f"the output layer has no {part} ({name} does not exist)"
    if tm.grad(name) is None:
        return f"needs the output layer's {part} gradient ({name}), which the update withholds"
    return None


FINAL_WEIGHT_GRAD = Requirement("final_weight_grad", "the output layer's weight gradient", lambda tm: _final(tm, "weight"))
FINAL_BIAS_GRAD = Requirement("final_bias_grad", "the output layer's bias gradient", lambda tm: _final(tm, "bias"))
def _final_any(tm: ThreatModel) -> str | None:
    weight, bias = _final(tm, "weight"), _final(tm, "bias")
    return None if weight is None or bias is None else "needs the output layer's weight or bias gradient; the update withholds both"


FINAL_LAYER_GRAD = Requirement("final_layer_grad", "the output layer's weight or bias gradient", _final_any)
BATCH_SIZE = Requirement(
    "batch_size", "the batch size (fedaudit.batch_size)",
    lambda tm: None if tm.batch_size else "needs the batch size: the update does not record fedaudit.batch_size; pass --batch-size",
)
SINGLE_STEP = Requirement(
    "single_step", "a one-step update (FedSGD)",
    lambda tm: None if tm.meta.local_steps == 1 else f"needs a one-step (FedSGD) update; this one has {tm.meta.local_steps} local steps",
)
SINGLE_SAMPLE = Requirement(
    "single_sample", "a batch of one",
    lambda tm: None if tm.batch_size == 1 else f"needs a batch of one; the batch size is {tm.batch_size or 'unknown'}",
)
ALL_PARAMETERS = Requirement(
    "all_parameters", "every parameter's gradient",
    lambda tm: None if not tm.absent else f"needs every parameter's gradient; the update withholds {len(tm.absent)} (e.g. {tm.absent[0]})",
)
BN_MODE = Requirement(
    "bn_mode", "the BatchNorm mode of local training (fedaudit.bn_mode)",
    lambda tm: None if (not tm.has_batchnorm or tm.meta.bn_mode) else "the model has BatchNorm and the update does not record fedaudit.bn_mode",
)


def unmet(requirements: Iterable[Requirement], tm: ThreatModel) -> list[str]:
    """The reasons, in order, that ``tm`` does not satisfy ``requirements`` (empty when all are met)."""
    return [why for why in (r.why_not(tm) for r in requirements) if why]
