"""The documents fedaudit prints on stdout (or writes with ``-o``), as types: what a pipeline parses.

Each is a dataclass that builds its JSON (``to_json``): every field is always present (``null`` where nothing was
measured, e.g. the measured band without ``--truth``), and every document says which command made it and the
schema it follows. The JSON Schemas in docs/schema/ are generated from these types (``python -m
fedaudit.report.schema``); a test validates every document the suite prints against them and fails when the
published files are stale. How the schemas change: docs/schema/README.md.

Typed: ``reconstruct``, ``labels``, ``inspect``, ``score``, ``audit``, ``audit-round``, ``defend``, ``capture`` and ``scan``;
nested parts are typed where a pipeline gates on them (bands, ranges, gates, cells, clients) and open objects
elsewhere. The tools' own outputs (``models``, ``init-checkpoint``, ``aux export``, ``train-*``) are not yet.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

# The stdout documents' schema version: the major number changes when a field is removed, renamed or changes type;
# the minor when one is added (docs/schema/README.md).
STDOUT_SCHEMA_VERSION = "2.1"  # 2.1: ``scan``; audit-round's ``server_severity`` and ``server_findings``

Band = Literal["low", "medium", "high", "very_high"]
Gate = Literal["upper", "point", "lower"]  # which end of a band's range --fail-on reads


@dataclass
class Document:
    """What every stdout document carries."""

    command: ClassVar[str]  # the command that prints it (not a field: to_json puts it first)
    schema_name: ClassVar[str | None] = None  # its schema file's name when not the command's (text documents)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": STDOUT_SCHEMA_VERSION, "command": self.command, **dataclasses.asdict(self)}


@dataclass
class Identification:
    rate: float | None
    identified: int | None
    of: int | None
    band: Band | None


@dataclass
class ReconstructSummary(Document):
    """``fedaudit reconstruct``'s stdout: the run, its measured band (with ``--truth``), its truth-free estimate and
    the band ``--fail-on`` read."""

    command = "reconstruct"

    out: str
    status: Literal["complete", "interrupted"]
    attack: str
    distance: float | None
    labels: list[int]
    iterations_run: int
    barely_moved: bool | None
    # measured against the truth (null without --truth)
    risk_band: Band | None
    risk_band_range: list[Band] | None
    risk_band_psnr: Band | None
    summary: dict[str, Any] | None
    paper_best_match: dict[str, Any] | None
    blank_baseline: dict[str, Any] | None
    psnr_above_blank: float | None
    identification: Identification | None
    feature_relative_error: dict[str, Any] | None
    # the truth-free estimate
    risk_band_estimated: Band | None
    risk_band_estimated_range: list[Band] | None
    risk_band_estimated_confidence: float | None
    risk_band_estimated_p_higher: float | None
    estimate_source: str | None
    # what --fail-on read
    band_for_fail_on: Band | None
    band_source: str | None
    gate: Gate | None
    gate_line: str | None


@dataclass
class LabelsResult(Document):
    """``fedaudit labels METHOD``'s stdout: the counts per class, the labels, and what the reading rests on."""

    command = "labels"

    method: str
    paper: str
    counts_capable: bool
    num_samples: int
    counts: list[float]
    counts_int: list[int]
    labels: list[int]
    options: dict[str, Any]
    aux: dict[str, Any] | None
    seed: int
    diagnostics: dict[str, Any]
    warnings: list[str]
    timing_s: float
    truth_counts: list[int] | None
    metrics: dict[str, Any] | None
    evidence: dict[str, Any]
    channels: dict[str, Any]
    inputs: dict[str, Any]


@dataclass
class InspectResult(Document):
    """``fedaudit inspect``'s stdout: what an update contains and which methods can run on it."""

    command = "inspect"

    checkpoint: dict[str, Any]
    update: dict[str, Any]
    kind: Literal["gradient", "delta", "weights"]
    batch_size: int | None
    local_steps: int
    final_layer: str | None
    has_batchnorm: bool
    parameters_present: list[str]
    parameters_absent: list[str]
    restricted: bool
    client_buffers: list[dict[str, Any]]
    channels: dict[str, Any]
    finite: bool
    nonfinite_tensors: list[str]
    layers: list[dict[str, Any]]
    label_methods: dict[str, Any]
    attacks: dict[str, Any]
    defenses: dict[str, Any]
    warnings: list[str]


@dataclass
class ScoreSummary(Document):
    """``fedaudit score``'s stdout: a reconstruction measured against the truth."""

    command = "score"

    out: str
    risk_band: Band
    risk_band_range: list[Band]
    band_for_fail_on: Band
    gate: Gate
    gate_line: str
    summary: dict[str, Any]
    worst_image_risk_band: Band | None
    paper_best_match: dict[str, Any] | None
    blank_baseline: dict[str, Any] | None
    psnr_above_blank: float | None


@dataclass
class AuditCell:
    """One attack against one defended copy of the update."""

    defense: str
    attack: str
    psnr: float | None
    ssim: float | None
    risk_band: Band | None
    risk_band_range: list[Band] | None
    band_for_fail_on: Band | None
    risk_band_estimated: Band | None
    label_insacc: float | None
    label_insacc_floor: float | None
    label_self_check: dict[str, Any] | None
    error: str | None


@dataclass
class AuditSummary(Document):
    """``fedaudit audit``'s stdout: every attack against every defended copy, and the worst band."""

    command = "audit"

    out: str
    status: Literal["complete", "interrupted", "incomplete"]
    worst_risk_band: Band | None
    worst_band_for_fail_on: Band | None
    gate: Gate
    cells: list[AuditCell]


@dataclass
class RoundClient:
    """One client of a round."""

    client: str
    status: str
    band: Band | None
    labels: list[int] | None
    label_self_check: dict[str, Any] | None
    error: str | None
    exit: int | None


@dataclass
class RoundSummary(Document):
    """``fedaudit audit-round``'s stdout: every client of a round, the worst one and the bands' histogram."""

    command = "audit-round"

    out: str
    status: Literal["complete", "interrupted"]
    worst_client: str | None
    worst_band: Band | None
    histogram: dict[str, int]
    audited: int
    resumed: int
    clients: list[RoundClient]
    # whether every client got the server's stated global model (fedaudit/scan/round.py): "none" or "high"
    server_severity: str | None
    server_findings: list[dict[str, Any]]


@dataclass
class DefendSummary(Document):
    """``fedaudit defend DEFENSE``'s stdout: the defended update written and what the defense did."""

    command = "defend"

    output: str
    defense: dict[str, Any]
    relative_gradient_error: float | None
    defenses_applied: int


@dataclass
class CaptureSummary(Document):
    """``fedaudit capture``'s stdout: the recorded update, its recipe and which image went to which label and step."""

    command = "capture"

    update: str
    sha256: str
    truth: str | None
    kind: Literal["gradient", "delta", "weights"]
    batch_size: int
    local_steps: int
    num_examples: int
    tensors: int
    withheld: list[str]
    images: list[dict[str, Any]]


@dataclass
class TextReconstructSummary(Document):
    """``fedaudit reconstruct <text attack>``'s stdout: what was recovered, the measured band (with ``--truth``),
    the truth-free band and what ``--fail-on`` read. ``modality`` tells it from the image document."""

    command = "reconstruct"
    schema_name = "reconstruct-text"

    modality: Literal["text"]
    out: str
    status: Literal["complete"]
    attack: str
    batch_size: int | None
    recovered: int
    certified: int
    sequences: list[str]
    metrics: dict[str, Any] | None
    risk_band: Band | None
    risk_band_range: list[Band] | None
    risk_band_estimated: Band | None
    risk_band_estimated_range: list[Band] | None
    reveals: list[str]
    fail_on: dict[str, Any] | None


@dataclass
class TextInspectResult(Document):
    """``fedaudit inspect``'s stdout for a language-model folder: what the update shares and which attacks apply."""

    command = "inspect"
    schema_name = "inspect-text"

    modality: Literal["text"]
    checkpoint: dict[str, Any]
    update: dict[str, Any]
    kind: Literal["gradient", "delta", "weights"]
    batch_size: int | None
    local_steps: int
    parameters_present: list[str]
    parameters_absent: list[str]
    embeddings_shared: bool
    blocks_shared: list[int]
    finite: bool
    nonfinite_tensors: list[str]
    layers: list[dict[str, Any]]
    attacks: dict[str, Any]
    warnings: list[str]


@dataclass
class TextCaptureSummary(Document):
    """``fedaudit capture``'s stdout for a language-model folder: the recorded update and which line went to which
    local step."""

    command = "capture"
    schema_name = "capture-text"

    modality: Literal["text"]
    update: str
    sha256: str
    truth: str | None
    kind: Literal["gradient", "delta", "weights"]
    batch_size: int
    local_steps: int
    num_examples: int
    max_length: int
    tensors: int
    lines: list[dict[str, Any]]


@dataclass
class ScanFinding:
    """One finding of ``fedaudit scan`` (fedaudit/scan/finding.py)."""

    check: str
    tensor: str
    statistic: str
    value: float | str  # "inf" / "-inf" where the statistic is unbounded (a zero denominator)
    benign: str
    severity: Literal["info", "medium", "high"]
    indicates: str
    recovers: str
    detail: str
    extra: dict[str, Any] | None


@dataclass
class ScanResult(Document):
    """``fedaudit scan``'s stdout: is this checkpoint built to leak? (``--format sarif`` prints SARIF instead)."""

    command = "scan"

    checkpoint: dict[str, Any]
    severity: Literal["none", "info", "medium", "high"]
    built_to_leak: bool
    findings: list[ScanFinding]
    counts: dict[str, int]
    checks: list[str]
    seconds: dict[str, float]
    seconds_total: float
    declared: str | None
    kind: Literal["image", "text", "state_dict"]
    model_built: bool
    probe: str | None
    measured: dict[str, Any]
    notes: list[str]
    tensors: int
    round: dict[str, Any] | None  # a round folder's consistency read (fedaudit/scan/round.py), else null
    fedaudit_version: str
    created_at: str


DOCUMENTS: dict[str, type[Document]] = {t.schema_name or t.command: t for t in (
    ReconstructSummary, LabelsResult, InspectResult, ScoreSummary, AuditSummary, RoundSummary, DefendSummary,
    CaptureSummary, TextReconstructSummary, TextInspectResult, TextCaptureSummary, ScanResult)}


def pick(kind: type, record: dict[str, Any]) -> Any:
    """A ``kind`` from the entries of ``record`` it names (a record keeps more: an audit cell, a round's client)."""
    return kind(**{f.name: record.get(f.name) for f in dataclasses.fields(kind)})


def build(kind: type[Document], fields: dict[str, Any]) -> dict[str, Any]:
    """The JSON of a ``kind`` document from ``fields`` (see :func:`parse`: a field not given is None, an unknown one
    is a programming error)."""
    return parse(kind, fields).to_json()


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _value(hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` says: dataclasses built (also inside ``X | None``, ``list[X]``, ``dict[str, X]``)."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        return _value(arms[0], value) if len(arms) == 1 else value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return parse(hint, value)
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(hint)
        return [_value(item, v) for v in value] if dataclasses.is_dataclass(item) else value
    if origin is dict and isinstance(value, dict):
        item = typing.get_args(hint)[1]
        return {k: _value(item, v) for k, v in value.items()} if dataclasses.is_dataclass(item) else value
    return value


def parse(kind: type, record: dict[str, Any]) -> Any:
    """A ``kind`` (and its nested types) from a JSON-like ``record``; a field it lacks takes its default (None
    where there is none); a key ``kind`` does not name is a programming error (the type is the contract)."""
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = set(record) - set(fields)
    if unknown:
        raise TypeError(f"{kind.__name__} has no field(s) {sorted(unknown)}")
    hints = _hints(kind)
    out = {}
    for name, f in fields.items():
        if name in record:
            out[name] = _value(hints[name], record[name])
        elif f.default is not dataclasses.MISSING:
            out[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[name] = f.default_factory()
        else:
            out[name] = None
    return kind(**out)
