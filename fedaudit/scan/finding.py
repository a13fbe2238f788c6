"""A scan finding: which tensor, which statistic, its value, what benign models show, what the attack recovers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# "info": worth a look, benign models show it too (a BatchNorm at identity at random init); "medium": outside every
# benign checkpoint measured, no construction matched; "high": the structure a published construction leaves.
SEVERITIES = ("info", "medium", "high")


@dataclass(frozen=True)
class Finding:
    check: str          # the registered check that found it
    tensor: str         # the tensor (or module) it names
    statistic: str      # what was measured
    value: float
    benign: str         # the range benign checkpoints show (docs/results/scan.md)
    severity: str
    indicates: str      # the construction it points to
    recovers: str       # what that attack recovers from a client's update
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["extra"] = out["extra"] or None
        value = out["value"]
        out["value"] = value if value != value or abs(value) != float("inf") else ("inf" if value > 0 else "-inf")
        return out


def level(severity: str) -> int:
    return SEVERITIES.index(severity)
