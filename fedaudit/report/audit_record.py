"""audit.json, the full record ``fedaudit audit`` writes beside its cells, as types.

The audit job builds one :class:`AuditRecord`: audit.json, audit.html, the stdout summary and the stderr cell lines
are read from it by attribute. Every field is always written (``null`` where a cell did not run or measured nothing).
Its JSON Schema is docs/schema/audit-record.json (``python -m fedaudit.report.schema``); how it changes:
docs/schema/README.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fedaudit.report.document import Record
from fedaudit.report.types import Band, Gate

# audit.json's schema version ("1" was the untyped record before 0.3.0; docs/schema/README.md)
AUDIT_SCHEMA_VERSION = "2.0"


@dataclass
class CellRecord:
    """One attack against one defended copy: its figures, or the error that stopped it."""

    defense: str
    attack: str
    psnr: float | None = None
    ssim: float | None = None
    lpips: float | None = None
    risk_band: Band | None = None
    risk_band_range: list[Band] | None = None
    band_for_fail_on: Band | None = None
    risk_band_estimated: Band | None = None
    risk_band_estimated_confidence: float | None = None
    label_method: str | None = None
    label_insacc: float | None = None
    label_insacc_floor: float | None = None
    label_self_check: dict[str, Any] | None = None
    iterations: int | None = None
    seconds: float | None = None
    status: Literal["complete", "interrupted"] | None = None
    feature_relative_error: float | None = None
    report: str | None = None  # the cell's report.json, relative to the audit folder
    grid: str | None = None
    error: str | None = None

    def line(self) -> str:
        """The cell's line on stderr as it finishes."""
        psnr = None if self.psnr is None else round(self.psnr, 2)
        near = (", labels near a guess (self-check): the band may under-report"
                if (self.label_self_check or {}).get("near_guess") else "")
        shown = f" [{self.risk_band_range[0]} .. {self.risk_band_range[1]}]" if self.risk_band_range else ""
        return f"{self.defense} x {self.attack}: PSNR {psnr}, risk {self.risk_band}{shown}{near}"


@dataclass
class DefenseRow:
    """One defended copy of the update: its chain, what the defenses did and what they cost."""

    defense: str
    chain: list[dict[str, Any]]
    records: list[dict[str, Any]] | None = None
    utility: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class AuditRecord(Record):
    """audit.json."""

    command: Literal["audit"]
    status: Literal["complete", "interrupted", "incomplete"]
    plan: dict[str, list[str]]
    gate: Gate
    failed: list[str] = field(default_factory=list)
    rows: list[DefenseRow] = field(default_factory=list)
    cells: list[CellRecord] = field(default_factory=list)
    worst_risk_band: Band | None = None
    worst_band_for_fail_on: Band | None = None
