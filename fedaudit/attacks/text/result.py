"""What every text attack returns: the recovered sequences as token ids (best first), whether each is certified (an
exact attack's checks all passed; an optimisation attack certifies nothing), a score per sequence (lower is better:
DAGER's mean span distance, TAG's and LAMP's gradient distance) and what the attack saw (``diagnostics``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TextResult:
    sequences: list[list[int]]
    exact: list[bool]
    scores: list[float]
    diagnostics: dict = field(default_factory=dict)
