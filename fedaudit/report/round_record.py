"""audit_round.json, the full record ``fedaudit audit-round`` writes, and each client's row, as types.

A client's row crosses a process boundary (a worker or a Ray task returns it; ``clients/NAME/result.json`` stores it
for resuming) as JSON and is read back with :meth:`ClientRow.of`; audit_round.json, audit_round.html, the stdout
summary and the stderr client lines are read from the types by attribute. Schema: docs/schema/round-record.json
(``python -m fedaudit.report.schema``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from fedaudit.report.document import Record
from fedaudit.report.types import Band, parse

# audit_round.json's schema version ("1" was the untyped record before 0.3.0; docs/schema/README.md)
ROUND_SCHEMA_VERSION = "2.1"  # 2.1: ``server`` (the round's consistency, issue 89)


@dataclass
class ClientAttack:
    """One attack on one client: the band ``--fail-on`` reads (estimated: a round has no truth) and its files."""

    attack: str
    band: Band | None
    band_source: str | None
    band_point: Band | None
    band_range: list[Band] | None
    confidence: float | None
    p_higher: float | None
    distance: float | None
    grid: str | None  # relative to the client's folder
    report: str | None


@dataclass
class ClientRow:
    """One client of the round: its labels, each attack's band, or the error that stopped it."""

    client: str
    update: str
    status: Literal["ok", "error"] = "error"
    seconds: float | None = None
    threat_model: dict[str, Any] | None = None
    labels: list[int] | None = None
    label_method: str | None = None
    label_evidence: dict[str, Any] | None = None
    label_self_check: dict[str, Any] | None = None
    attacks: list[ClientAttack] = field(default_factory=list)
    band: Band | None = None
    exit: int | None = None
    error: str | None = None
    traceback: str | None = None
    resumed: bool = False

    @classmethod
    def of(cls, record: dict[str, Any]) -> ClientRow:
        return parse(cls, record)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def line(self) -> str:
        """The client's line on stderr as it finishes."""
        if self.status != "ok":
            return f"{self.client}: error (exit {self.exit}): {self.error}"
        near = ", near a guess (self-check)" if (self.label_self_check or {}).get("near_guess") else ""
        return f"{self.client}: {self.band or 'labels only'} labels {self.labels}{near} ({self.seconds} s)"


@dataclass
class RoundError:
    client: str
    error: str | None
    exit: int | None


@dataclass
class RoundRecord(Record):
    """audit_round.json."""

    command: Literal["audit-round"]
    status: Literal["running", "complete", "interrupted"]
    round_dir: str
    engine: dict[str, Any]
    clients: list[ClientRow]
    audited: int
    errors: list[RoundError]
    worst_client: str | None
    worst_band: Band | None
    histogram: dict[str, int]
    band_source: str
    # did every client get the stated global model? (fedaudit/scan/round.py: findings, what was read), read before
    # any client is attacked; null for a record written before 2.1
    server: dict[str, Any] | None = None
