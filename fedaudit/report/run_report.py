"""report.json, the full record ``reconstruct`` and ``score`` write into their output folder, as types.

The run builds one :class:`RunReport`; report.json, report.html, the stdout summary, the stderr notes, an audit's
cells and a round's client rows are all read from it by attribute (no code outside fedaudit/report/ reads a report by
string key). Every field is always written (``null`` where nothing was measured: a score has no attack, a run without
``--truth`` no ``metrics``). Parts a pipeline gates on are closed types (bands, ranges, the gate, the verdict, the
summary statistics); the rest are open objects documented in docs/metrics.md and docs/methods/verdict.md. The JSON
Schema is published as docs/schema/report.json (``python -m fedaudit.report.schema``); how it changes:
docs/schema/README.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from fedaudit.report.document import Record
from fedaudit.report.types import Band, Gate, parse

# report.json's schema version (its own line: "1" was the untyped record before 0.3.0); the rules of
# docs/schema/README.md apply: the major number changes when a field is removed, renamed or changes type.
REPORT_SCHEMA_VERSION = "2.1"


@dataclass
class Stat:
    """One metric over the batch: its mean, spread and a bootstrap interval of the mean."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    mean_interval: list[float] | None


@dataclass
class ImageSummary:
    psnr: Stat | None
    ssim: Stat | None
    lpips: Stat | None  # null where LPIPS is unavailable (conventions.lpips.unavailable_reason says why)

    def items(self) -> list[tuple[str, Stat | None]]:
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]


@dataclass
class MeasuredIdentification:
    """Each reconstruction's own original ranked by LPIPS among the batch and the distractors (docs/metrics.md)."""

    rate: float | None
    identified: int | None
    of: int | None
    firm: int | None
    possible: int | None
    views: list[int] | None  # identified in each view: the image, then its four one-pixel shifts
    nulls: dict[str, Any] | None
    band: Band | None
    chance: float | None
    candidates: int | None
    distractors: int | None
    net: str | None
    backbone_source: str | None
    per_image: list[dict[str, Any]] | None
    method: str | None
    reason: str | None  # why there is no rate (LPIPS unavailable)


@dataclass
class MeasuredBand:
    """The measured band as an interval: the worse of the PSNR-above-floor and identification readings."""

    band: Band
    range: list[Band]
    width: int
    psnr: dict[str, Any] | None
    identification: dict[str, Any] | None
    why: str | None
    narrow: str | None  # what would narrow a range of two levels or more (None when narrower)
    method: str | None
    level: float | None


@dataclass
class Measured:
    """``metrics``: the reconstruction measured against the truth (only with ``--truth``; ``features`` alone for an
    attack that recovered features but no images)."""

    per_image: list[dict[str, Any]] | None
    summary: ImageSummary | None
    paper_best_match: dict[str, Any] | None
    blank_baseline: dict[str, Any] | None
    psnr_above_blank: float | None
    identification: MeasuredIdentification | None
    risk_band_psnr: Band | None
    risk_band: Band | None
    risk_band_range: list[Band] | None
    band: MeasuredBand | None
    worst_image_risk_band: Band | None
    conventions: dict[str, Any] | None
    features: dict[str, Any] | None

    def pairs(self) -> list[tuple[int, int]] | None:
        """(truth index, reconstruction index) of the one-to-one matching."""
        return None if self.per_image is None else [(r["truth_index"], r["recon_index"]) for r in self.per_image]

    def skipped_line(self) -> str | None:
        """One line for stderr when LPIPS, and with it identification, could not be computed: the band is then
        PSNR's alone, which a reviewer must know (report.json alone said so before)."""
        ident = self.identification
        if ident is not None and ident.rate is not None:
            return None
        return (f"warning: LPIPS and identification were skipped ({(ident and ident.reason) or 'no LPIPS weights'}): "
                "the band is PSNR-only; pass --lpips-weights or install the LPIPS backbone weights (docs/metrics.md)")

    def stat(self, name: Literal["psnr", "ssim", "lpips"]) -> float | None:
        """The batch mean of one metric (None where not measured)."""
        s = getattr(self.summary, name) if self.summary else None
        return None if s is None else s.mean


@dataclass
class Verdict:
    """The truth-free estimate: the frozen rule's, or calibrated on proxies (docs/methods/verdict.md)."""

    band: Band | None
    range: list[Band] | None
    confidence: float | None
    p_higher: float | None
    score_db: float | None
    cuts_db: list[float] | None
    features: dict[str, Any] | None
    source: str | None
    why: str | None
    rule: dict[str, Any] | None  # the frozen rule's reading when the proxies calibrated the estimate
    outside_proxies: bool | None
    caveats: list[str] = field(default_factory=list)


@dataclass
class Proxies:
    """The proxy batches the estimate was calibrated on (or why there were none)."""

    requested: int
    not_applicable: str | None
    warnings: list[str] = field(default_factory=list)
    source: str | None = None
    interrupted: bool | None = None
    recipe: dict[str, Any] | None = None
    seconds: float | None = None
    # rows of each stacked batch the proxies were attacked in (fedaudit/attacks/stacked_targets.py); [] with
    # ``one_by_one`` saying why they ran one after another
    stacked_batches: list[int] = field(default_factory=list)
    one_by_one: str | None = None
    measured: list[dict[str, Any]] = field(default_factory=list)
    grids: list[str] = field(default_factory=list)


@dataclass
class Evidence:
    """What the run shows without the truth, and the estimate made of it."""

    labels: dict[str, Any] | None
    channels: dict[str, Any] | None
    reconstruction: dict[str, Any] | None
    verdict: Verdict
    proxies: Proxies | None


@dataclass
class Movement:
    mean_abs_pixel_change: float | None
    barely_moved: bool | None
    threshold: float | None


@dataclass
class AttackRun:
    """The attack as it ran: distance, restarts, iterations, what it recovered besides images."""

    name: str
    paper: str | None
    distance: float | None
    best_restart: int | None
    iterations_run: int
    diverged_restarts: list[int] | None
    interrupted: bool
    restart_batches: list[int] | None
    restarts_one_by_one: str | None
    cuda_graph: dict[str, Any] | None
    resumed_from: str | None
    recovered_labels: list[int]
    seconds_per_iteration: float | None
    movement: Movement
    history: list[list[Any]]
    warnings: list[str] = field(default_factory=list)
    recovered: dict[str, Any] | None = None  # closed-form attacks: what the exact path recovered
    details: dict[str, Any] | None = None


@dataclass
class LabelReading:
    """The labels the attack optimised with: given, from a file, or read by a label method."""

    source: Literal["given", "file", "method"]
    labels: list[int]
    method: str | None = None
    file: str | None = None
    counts: list[float] | None = None
    diagnostics: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    evidence: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None  # against the truth's labels (with --truth)

    @classmethod
    def of_method(cls, doc: dict[str, Any]) -> LabelReading:
        """The reading of a label method's result (``fedaudit labels``' document, fedaudit/jobs/labels.py)."""
        return cls(source="method", labels=doc["labels"], method=doc["method"], counts=doc["counts"],
                   diagnostics=doc["diagnostics"], warnings=doc["warnings"], evidence=doc["evidence"],
                   metrics=doc.get("metrics"))

    def self_check(self) -> dict[str, Any] | None:
        return (self.evidence or {}).get("self_check")

    def chosen(self) -> str | None:
        """The method that read the labels (``auto``'s choice where auto ran)."""
        return (self.diagnostics or {}).get("chosen", self.method)


@dataclass
class FailOn:
    """What ``--fail-on`` tests: the measured range with the truth, else the estimated one, at the ``gate`` end."""

    band: Band | None
    gate: Gate
    source_kind: Literal["measured", "estimated"] | None
    point: Band | None = None
    range: list[Band] | None = None
    source: str | None = None
    line: str | None = None


@dataclass
class RunReport(Record):
    """report.json of ``reconstruct`` (and, without the attack's parts, of ``score``)."""

    command: Literal["reconstruct", "score"]
    status: Literal["complete", "interrupted"]
    truth_mismatch: str | None = None  # --truth-mismatch warn: the truth names another update
    threat_model: dict[str, Any] | None = None
    labels: LabelReading | None = None
    channels: dict[str, Any] | None = None
    attack: AttackRun | None = None
    evidence: Evidence | None = None
    risk_band_estimated: Band | None = None
    risk_band_estimated_range: list[Band] | None = None
    risk_band_estimated_confidence: float | None = None
    metrics: Measured | None = None
    defenses: list[dict[str, Any]] | None = None  # an audit cell: the defenses applied to the update first
    fail_on_band: FailOn | None = None
    images: list[str] = field(default_factory=list)
    grid: str | None = None
    html: str | None = None

    @property
    def verdict(self) -> Verdict | None:
        return self.evidence.verdict if self.evidence else None

    @property
    def measured(self) -> bool:
        """Whether the run was measured against the truth (a band, not only features)."""
        return self.metrics is not None and self.metrics.risk_band is not None

    @classmethod
    def of(cls, record: dict[str, Any]) -> RunReport:
        """A new report from a record (fedaudit/report/document.py ``new_report``), at this type's schema version;
        an unknown key is a programming error (the type is the contract)."""
        return parse(cls, {**record, "schema_version": REPORT_SCHEMA_VERSION})
