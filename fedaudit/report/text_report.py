"""report.json of a text attack (``fedaudit reconstruct dager`` on a language-model folder), as types; its schema is
published as docs/schema/text-report.json (``python -m fedaudit.report.schema``). Bands and ranges are the text
bands of fedaudit/metrics/text_risk.py (docs/metrics.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fedaudit.report.document import Record
from fedaudit.report.run_report import FailOn
from fedaudit.report.types import Band, parse

TEXT_REPORT_SCHEMA_VERSION = "1.0"


@dataclass
class RecoveredSequence:
    index: int
    text: str
    token_ids: list[int]
    certified: bool  # passed every exact check of the attack (DAGER: both blocks' spans)
    score: float | None  # the attack's own distance (lower is closer)


@dataclass
class SequencePair:
    """A true sequence and the recovered one matched to it (None: none left), with their scores."""

    true_index: int
    true_text: str
    recovered_index: int | None
    recovered_text: str | None
    token_accuracy: float
    rouge1: float
    rouge2: float
    rougeL: float
    exact: bool


@dataclass
class TextMeasured:
    token_accuracy: float
    rouge1: float
    rouge2: float
    rougeL: float
    exact_rate: float
    exact: int
    of: int
    band: Band
    band_range: list[Band]
    why: str
    pairs: list[SequencePair]


@dataclass
class TextVerdict:
    """The truth-free band: from what the attack certified."""

    band: Band
    range: list[Band]
    source: str
    why: str
    reveals: list[str]  # what the update does and does not reveal (shared tensors, what the checks can see)


@dataclass
class TextReport(Record):
    command: Literal["reconstruct"]
    modality: Literal["text"]
    status: Literal["complete"]
    attack: str
    model: dict[str, Any]
    update: dict[str, Any]
    sequences: list[RecoveredSequence]
    diagnostics: dict[str, Any]
    verdict: TextVerdict | None
    measured: TextMeasured | None
    fail_on_band: FailOn | None
    truth_mismatch: str | None = None
    warnings: list[str] = field(default_factory=list)
    html: str | None = None

    @property
    def certified(self) -> int:
        """How many recovered sequences passed every exact check."""
        return sum(s.certified for s in self.sequences)

    @classmethod
    def of(cls, record: dict[str, Any]) -> TextReport:
        return parse(cls, {**record, "schema_version": TEXT_REPORT_SCHEMA_VERSION})
