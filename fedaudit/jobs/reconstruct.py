"""A reconstruction job: labels -> attack loop -> metrics -> report folder, the one way every entry point runs an
attack (``fedaudit reconstruct``, the audit matrix, benchmarks, tests)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedaudit.attacks import ATTACKS, cuda_graph
from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.engine import GradientEngine
from fedaudit.attacks.loop import BARELY_MOVED, LoopConfig, LoopResult, optimize
from fedaudit.attacks.run_state import initial_images
from fedaudit.channels import bn_statistics
from fedaudit.errors import InputError, RuntimeFailure
from fedaudit.io.files import read_input_text, read_safetensors, safetensors_bytes
from fedaudit.io.truth import Truth, check_truth
from fedaudit.jobs.gate import fail_on_band
from fedaudit.jobs.labels import LabelJob
from fedaudit.jobs.proxies import run_proxies
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import samples_in_update
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.metrics.features import feature_recovery
from fedaudit.metrics.risk import GATES
from fedaudit.models import smooth_twins
from fedaudit.models.head import output_layer_io
from fedaudit.report.document import new_report
from fedaudit.report.label_lines import summary_line
from fedaudit.report.outdir import OutputDir
from fedaudit.report.run_report import AttackRun, Evidence, LabelReading, Measured, RunReport, Verdict
from fedaudit.report.types import Identification, ReconstructSummary, build, parse
from fedaudit.report.write import comparison_grid, write_report
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel
from fedaudit.verdict import unfinished
from fedaudit.verdict.calibrated import calibrated
from fedaudit.verdict.channels import channel_evidence
from fedaudit.verdict.estimate import estimate
from fedaudit.verdict.reconstruction import reconstruction_evidence

MULTI_STEP = ("merged", "unroll")
MAX_ITERATIONS_ENV = "FEDAUDIT_MAX_ITERATIONS"
SHORT_BUDGET = 0.1  # a run under this fraction of the attack's default iterations gets a warning


def max_iterations() -> int | None:
    """``FEDAUDIT_MAX_ITERATIONS``: every attack runs at most this many iterations, whatever its ``-n``, and its report
    says so. For smoke runs of a pipeline's plumbing (the README's commands run under it in the tests), never for a
    verdict: a capped run's band shows little about leakage."""
    text = os.environ.get(MAX_ITERATIONS_ENV)
    if not text:
        return None
    try:
        cap = int(text)
    except ValueError:
        raise InputError(f"{MAX_ITERATIONS_ENV} must be a positive integer, got {text!r}") from None
    if cap < 1:
        raise InputError(f"{MAX_ITERATIONS_ENV} must be a positive integer, got {text!r}")
    return cap


def check_counts(proxies: int, checkpoint_every: int) -> None:
    """``--proxies`` and ``--checkpoint-every`` are counts (>= 0): refused by the CLI before anything is read, and by
    the job for callers in Python."""
    for flag, value in (("--proxies", proxies), ("--checkpoint-every", checkpoint_every)):
        if value < 0:
            raise InputError(f"{flag} must be >= 0, got {value}")


def read_labels_file(path: Path, expected: int, num_classes: int) -> list[int]:
    """Labels from ``fedaudit labels -o FILE`` (JSON with "labels") or a safetensors 'labels' tensor."""
    p = Path(path)
    if p.suffix == ".json":
        text = read_input_text(p, "labels file")
        try:
            labels = json.loads(text)["labels"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"labels file {str(p)!r} is not a JSON object with a 'labels' list: {exc}") from None
    else:
        tensors, _ = read_safetensors(p, "labels file")
        if "labels" not in tensors:
            raise InputError(f"labels file {str(p)!r} has no 'labels' tensor")
        labels = tensors["labels"].tolist()
    if not isinstance(labels, list) or not all(type(v) is int and 0 <= v < num_classes for v in labels):
        raise InputError(f"labels file {str(p)!r}: labels must be integers in [0, {num_classes - 1}]")
    if len(labels) != expected:
        raise InputError(f"labels file {str(p)!r} has {len(labels)} labels; the update mixes {expected} samples")
    return labels


@dataclass
class ReconstructResult:
    report: RunReport
    images: torch.Tensor  # [N, C, H, W] on the CPU (N = 0 when the attack stopped before images)
    tensors: dict[str, torch.Tensor]  # anything else the attack recovered (features, logits)
    loop: LoopResult
    proxies: list[dict[str, Any]] = field(default_factory=list)  # proxy records with their images (for the report)

    @property
    def interrupted(self) -> bool:
        return self.report.status == "interrupted"

    def summary(self, out: Path | str) -> dict[str, Any]:
        """The JSON ``fedaudit reconstruct`` prints (fedaudit/report/types.py ``ReconstructSummary``)."""
        r = self.report
        attack, labels, m, gate = r.attack, r.labels, r.metrics, r.fail_on_band
        assert attack is not None and labels is not None and gate is not None
        verdict = r.verdict or parse(Verdict, {})  # no evidence: every estimate field null
        out_d: dict[str, Any] = {
            "out": str(out), "status": r.status, "attack": attack.name, "distance": attack.distance,
            "labels": labels.labels, "iterations_run": attack.iterations_run, "barely_moved": attack.movement.barely_moved,
            "risk_band_estimated": verdict.band, "risk_band_estimated_range": verdict.range,
            "risk_band_estimated_confidence": verdict.confidence, "risk_band_estimated_p_higher": verdict.p_higher,
            "estimate_source": verdict.source, "band_for_fail_on": gate.band, "band_source": gate.source_kind,
            "gate": gate.gate, "gate_line": gate.line}
        if m is not None and m.features is not None:
            out_d["feature_relative_error"] = m.features["relative_error"]
        if m is not None and r.measured:
            ident = m.identification
            out_d.update(risk_band=m.risk_band, risk_band_range=m.risk_band_range,
                         summary=dataclasses.asdict(m.summary) if m.summary else None,
                         paper_best_match=m.paper_best_match, blank_baseline=m.blank_baseline,
                         psnr_above_blank=m.psnr_above_blank, risk_band_psnr=m.risk_band_psnr,
                         identification=Identification(ident.rate, ident.identified, ident.of, ident.band)
                         if ident else Identification(None, None, None, None))
        return build(ReconstructSummary, out_d)

    def notes(self, out: Path | str) -> list[str]:
        """The lines ``fedaudit reconstruct`` logs on stderr."""
        r, lines = self.report, []
        attack, m, verdict = r.attack, r.metrics, r.verdict
        assert attack is not None and r.labels is not None
        if r.truth_mismatch:
            lines.append(f"warning: {r.truth_mismatch}; the measured band is not this update's")
        lines += [f"warning: {w}" for w in attack.warnings]
        if attack.recovered and attack.recovered.get("images_note"):
            lines.append(attack.recovered["images_note"])
        if m is not None and m.features is not None:
            fe = m.features["relative_error"]
            lines.append(f"features: relative error mean {fe['mean']:.3g}, max {fe['max']:.3g}")
        if m is not None and r.measured:
            ident = m.identification
            found = f", identified {ident.identified}/{ident.of}" if ident and ident.rate is not None else ""
            lines.append(f"PSNR {m.stat('psnr'):.2f} dB, SSIM {m.stat('ssim'):.3f}{found}, risk {m.risk_band} -> "
                         f"{out}/report.html")
        else:
            lines.append(f"{r.status}: gradient distance {attack.distance:.4g} -> {out}/report.html")
        line = summary_line(r.labels.self_check(), reason=False)  # caveats say why
        if line:
            lines.append(f"labels {line}")
        if verdict is not None:
            lines += [f"caveat: {c}" for c in verdict.caveats]
            proxies = r.evidence.proxies if r.evidence else None
            if verdict.band and verdict.range and verdict.confidence is not None and verdict.p_higher is not None:
                lo, hi = verdict.range
                lines.append(f"estimated risk (no truth needed): {verdict.band} [{lo} .. {hi}], confidence "
                             f"{verdict.confidence:.2f}, P(higher) {verdict.p_higher:.2f} ({verdict.source})")
                lines += [f"warning: {w}" for w in (proxies.warnings if proxies else [])]
                if proxies and proxies.not_applicable:
                    lines.append(f"uncalibrated: {proxies.not_applicable}")
            else:
                lines.append(f"estimated risk: none ({verdict.why})")
        if m is not None and m.band is not None:
            lines.append(f"measured: {m.band.why}")
            skipped = m.skipped_line()
            if skipped:
                lines.append(skipped)
        if r.fail_on_band and r.fail_on_band.line:
            lines.append(r.fail_on_band.line)
        return lines


@dataclass
class ReconstructJob:
    """Everything one attack run needs, resolved once: the attack and its options, the loop settings (the
    attack's defaults updated with ``loop``), where the labels come from (a label method, a labels file, or
    ``given`` labels, e.g. the truth in a benchmark), the multi-step mode and the checkpoint policy."""

    session: Session
    tm: ThreatModel
    attack: str
    options: dict[str, Any] | None = None
    loop: dict[str, Any] | None = None  # iterations, restarts, lr, schedule (None or absent: the attack's default)
    labels: str | None = None  # label method (default: the attack's own)
    label_options: dict[str, Any] | None = None
    label_self_check: int = 0  # simulated clients per kind for the label method's self-check (0: none)
    # readings of this job's threat model by (method, options, self-check, truth given): jobs on one update share
    # one dict, so that the label method, and its self-check above all, runs once (the audit's cells of one row)
    label_cache: dict[str, dict[str, Any]] | None = None
    labels_file: Path | None = None
    given_labels: list[int] | None = None
    multi_step: str = "merged"  # merged: one batch of B*K images (FedLeak); unroll: K simulated local steps
    proxies: int = 0  # proxy batches that calibrate the truth-free estimate (fedaudit/jobs/proxies.py); 0: the rule
    gate: str = "upper"  # which end of the band range --fail-on tests: upper | point | lower
    truth_mismatch: str = "error"  # a truth recorded for another update: error | warn (fedaudit/io/truth.py)
    checkpoint_every: int = 0
    checkpoint_path: Path | None = None
    resume: Path | None = None
    monitor: Callable | None = None
    monitor_every: int = 0
    attack_cls: type[OptimizationAttack] = field(init=False)
    settings: dict[str, Any] = field(init=False)
    label_method: str = field(init=False)  # ``labels``, or the attack's default label method

    def __post_init__(self) -> None:
        self.tm.on(self.session.device)  # one device route: its label reading and its attack run where the model is
        self.attack_cls = ATTACKS.get(self.attack)
        self.options = self.attack_cls.parse_options(self.options)
        self.settings = self.attack_cls.loop_settings(self.loop)
        cap = max_iterations()
        if cap is not None and self.settings["iterations"] > cap:  # a smoke run of the plumbing (module docstring)
            self.settings["iterations"] = cap
            self.settings["iterations_capped"] = f"{MAX_ITERATIONS_ENV}={cap}"
        self.label_method = self.labels or self.attack_cls.default_labels
        if self.label_self_check and (self.labels_file is not None or self.given_labels is not None):
            raise InputError("--self-check checks a label method's reading; labels from a file have none to check")
        if self.multi_step not in MULTI_STEP:
            raise InputError(f"--multi-step must be one of {', '.join(MULTI_STEP)}")
        check_counts(self.proxies, self.checkpoint_every)
        if self.gate not in GATES:
            raise InputError(f"--gate must be one of {', '.join(GATES)}, got {self.gate!r}")

    def proxy(self, session: Session, tm: ThreatModel, labels: list[int]) -> ReconstructJob:
        """This run on a proxy batch's threat model (fedaudit/jobs/proxies.py): the same attack, options, loop
        settings and multi-step mode, the proxy's labels given, and no proxies of its own."""
        return ReconstructJob(session, tm, self.attack, self.options, self.loop, given_labels=labels,
                              multi_step=self.multi_step, proxies=0, gate=self.gate)

    def why_not(self) -> list[str]:
        """Why this run cannot start on its threat model (the attack's needs, then its label method's), or []."""
        reasons = [f"{self.attack}: {r}" for r in self.attack_cls.why_not(self.tm)]
        if self.given_labels is None and self.labels_file is None:
            method = LABEL_METHODS.get(self.label_method)
            reasons += [f"labels {self.label_method}: {r}" for r in method.why_not(self.tm, self.session)]
        return reasons

    # --- the pieces, in the order run() uses them --------------------------------------------------------------
    def resolve_labels(self, truth: Truth | None = None) -> tuple[list[int], LabelReading]:
        """The labels the attack optimises with, and what the report says about them."""
        tm = self.tm
        n = samples_in_update(tm)
        if self.given_labels is not None:
            labels = [int(v) for v in self.given_labels]
            reading = LabelReading(source="given", labels=labels)
        elif self.labels_file is not None:
            labels = read_labels_file(self.labels_file, n, tm.spec.num_classes)
            reading = LabelReading(source="file", labels=labels, file=str(self.labels_file))
        else:
            reading = LabelReading.of_method(self.label_reading(truth))
            labels = reading.labels
        if len(labels) != n:
            raise InputError(f"{self.label_method} recovered {len(labels)} labels for {n} samples (a set-only method); "
                             "choose a count-capable one (e.g. --labels auto)")
        return labels, reading

    def label_reading(self, truth: Truth | None) -> dict[str, Any]:
        """The label job's output for this update, from ``label_cache`` when a job on the same update ran it."""
        key = json.dumps([self.label_method, self.label_options, self.label_self_check, truth is not None],
                         sort_keys=True, default=str)
        cache = self.label_cache if self.label_cache is not None else {}
        if key not in cache:
            cache[key] = LabelJob(self.session, self.tm, self.label_method, self.label_options,
                                  self_check=self.label_self_check, truth_mismatch=self.truth_mismatch).run(truth)
        return cache[key]

    def build(self, labels: list[int] | torch.Tensor) -> OptimizationAttack:
        """The attack, with its gradient engine on the session's device."""
        self.attack_cls.check_applicable(self.tm)
        unroll = self.multi_step == "unroll" and self.tm.meta.local_steps > 1
        if unroll and self.tm.meta.kind == "gradient":
            raise InputError("--multi-step unroll needs a delta or weights update")
        labels = torch.as_tensor(labels, device="cpu")  # the attack moves them to its engine's device
        engine = GradientEngine(self.tm, self.tm.device, unroll=unroll)
        attack = self.attack_cls(self.tm, engine, labels, self.options, int(labels.shape[0]),
                                 iterations=self.settings["iterations"])
        cuda_graph.why_not(attack, self.settings["cuda-graph"])  # --cuda-graph on where it cannot apply: exit 2 now
        return attack

    def loop_config(self, labels: list[int]) -> LoopConfig:
        s = self.settings
        return LoopConfig(iterations=s["iterations"], restarts=s["restarts"], lr=s["lr"], schedule=s["schedule"],
                          seed=self.session.seed, checkpoint_every=self.checkpoint_every,
                          checkpoint_path=self.checkpoint_path, resume=self.resume, quiet=self.session.quiet,
                          progress=self.session.progress,
                          fingerprint=self.fingerprint(labels), monitor=self.monitor, monitor_every=self.monitor_every,
                          restart_batch=s["restart-batch"], cuda_graph=s["cuda-graph"], runs_after=self.proxies)

    def fingerprint(self, labels: list[int]) -> str:
        s = self.settings
        blob = json.dumps([self.attack, self.options, self.multi_step, [int(v) for v in labels], self.tm.update.sha256,
                           self.tm.checkpoint.sha256, s["iterations"], s["restarts"], s["lr"], s["schedule"],
                           self.session.seed])
        return hashlib.sha256(blob.encode()).hexdigest()

    def optimize(self, attack: OptimizationAttack, labels: list[int]) -> LoopResult:
        try:
            return optimize(attack, self.loop_config(labels))
        except (torch.OutOfMemoryError, MemoryError):
            shape = "x".join(map(str, attack.shape))
            raise RuntimeFailure(
                f"out of memory running {self.attack} on {attack.num_images} images ({shape}) with "
                f"{self.settings['restarts']} restart(s) on {self.session.device}: try fewer images per run "
                "(--batch-size), a smaller model input, or --device cpu") from None

    # --- the whole run -------------------------------------------------------------------------------------------
    def run(self, truth: Truth | None = None, inputs: dict[str, Any] | None = None,
            optimized: tuple[OptimizationAttack, LoopResult] | None = None) -> ReconstructResult:
        """Run the attack; the report carries metrics when ``truth`` is given (only metrics read it). ``optimized``:
        the attack this job built and its loop's result, optimised elsewhere (stacked proxies,
        fedaudit/jobs/proxies.py); the rest of the run is the same."""
        tm, s = self.tm, self.settings
        mismatch = check_truth(truth, tm.update.sha256, self.truth_mismatch) if truth is not None else None
        self.attack_cls.check_applicable(tm)  # before the labels: "not applicable: <why>" names the attack's reason
        labels, label_report = self.resolve_labels(truth)
        if optimized is None:
            attack = self.build(labels)
            result = self.optimize(attack, labels)
        else:
            attack, result = optimized
        record = new_report("reconstruct", inputs or {}, {
            "attack": self.attack, "attack_options": self.options,
            "labels": {"method": self.label_method, "file": "file", "given": "given"}[label_report.source],
            "multi_step": self.multi_step if tm.meta.local_steps > 1 else None, "iterations": s["iterations"],
            "restarts": s["restarts"], "lr": s["lr"], "schedule": s["schedule"], "restart_batch": s["restart-batch"],
            "cuda_graph": s["cuda-graph"], "checkpoint_every": self.checkpoint_every, "lpips_net": self.session.lpips_net},
            seed=self.session.seed, device=str(self.session.device))
        record["timings"]["attack"] = round(result.seconds, 3)
        report = RunReport.of(record)
        report.status = "interrupted" if result.interrupted else "complete"
        report.truth_mismatch = mismatch
        report.threat_model = {"arch": tm.spec.arch, "kind": tm.meta.kind, "batch_size": tm.batch_size,
                               "local_steps": tm.meta.local_steps, "parameters_matched": len(tm.present),
                               "parameters_withheld": len(tm.absent), "bn_mode": tm.meta.bn_mode}
        report.labels = label_report
        report.channels = {"bn_statistics": {**bn_statistics.availability(tm), "attack_prior": attack.bn_usage}}
        report.attack = self.attack_run(result)
        smoothed = getattr(getattr(attack, "engine", None), "smoothed", None)
        if smoothed:  # the attack's model differs from the client's here (fedaudit/models/smooth_twins.py)
            report.attack.warnings.append(smooth_twins.note(smoothed))
        tensors = result.extras.get("tensors", {})
        images = result.images.cpu()
        report.evidence, proxies = self.evidence(attack, result, report)
        if report.evidence.proxies and report.evidence.proxies.interrupted:
            report.status = "interrupted"  # Ctrl-C while the proxies ran: the run is kept, the exit says so
        verdict = report.evidence.verdict
        budget = s["iterations"] * s["restarts"]
        if result.interrupted and verdict.band is not None:  # fedaudit/verdict/unfinished.py
            verdict.range = unfinished.opened(verdict.range)
            verdict.confidence = unfinished.capped(verdict.confidence)
            verdict.caveats = [*verdict.caveats, unfinished.note(result.iterations_run, budget)]
        report.risk_band_estimated = verdict.band
        report.risk_band_estimated_range = verdict.range
        report.risk_band_estimated_confidence = verdict.confidence
        if truth is not None:
            metrics: dict[str, Any] = {}
            if images.shape[0]:
                start = initial_images(attack, self.session.seed, result.best_restart)
                metrics = evaluate_images(images, truth.images, self.session.lpips_net, self.session.lpips_weights,
                                          attacked_arch=tm.spec.arch, init=None if start is None else start.cpu(),
                                          seed=self.session.seed)
            if "features" in tensors:
                true_f = output_layer_io(tm.model, tm.spec, tm.output_layer, truth.images, tm.train_bn,
                                         chunk=max(len(truth.images), 1))[0]
                metrics["features"] = feature_recovery(
                    tensors["features"], true_f, result.labels, truth.labels.tolist() if truth.labels is not None else None)
            report.metrics = parse(Measured, metrics) if metrics else None
            m = report.metrics
            if result.interrupted and m is not None and m.band is not None:  # measured on unfinished images
                m.risk_band_range = m.band.range = unfinished.opened(m.band.range)
                m.band.narrow = unfinished.note(result.iterations_run, budget)
        report.fail_on_band = fail_on_band(report.metrics, verdict, self.gate)
        return ReconstructResult(report, images, tensors, result, proxies)

    def attack_run(self, result: LoopResult) -> AttackRun:
        """The report's record of the attack as it ran, with its warnings (a run that barely moved, a capped or a
        short budget) and what an exact path recovered."""
        s = self.settings
        warnings = []
        if result.barely_moved:
            warnings.append(
                f"the images barely moved from their initialisation (mean pixel change {result.movement:.3f} over "
                f"{result.iterations_run} iterations): this run shows nothing about leakage; raise --lr or --iterations")
        if s.get("iterations_capped"):
            warnings.append(f"iterations capped at {s['iterations']} by {s['iterations_capped']}: a smoke run, not a verdict")
        default = self.attack_cls.defaults["iterations"]
        budget = s["iterations"] * s["restarts"]
        if result.interrupted and result.iterations_run < budget:
            warnings.append(unfinished.note(result.iterations_run, budget))
        if s["iterations"] < SHORT_BUDGET * default:
            warnings.append(f"{s['iterations']} iterations is under {SHORT_BUDGET:.0%} of {self.attack}'s default "
                            f"({default}): a low band from so short a run shows little about leakage")
        extra = result.extras.get("report")
        section = {result.extras.get("section", "details"): extra} if extra is not None else {}
        return parse(AttackRun, {
            "name": self.attack, "paper": self.attack_cls.paper, "distance": result.distance,
            "best_restart": result.best_restart, "iterations_run": result.iterations_run,
            "diverged_restarts": result.diverged_restarts, "interrupted": result.interrupted,
            # sizes of the stacked restart batches (fedaudit/attacks/batched_restarts.py); [] = one by one
            "restart_batches": result.restart_batches, "restarts_one_by_one": result.restarts_one_by_one,
            "cuda_graph": result.cuda_graph, "resumed_from": result.resumed_from, "recovered_labels": result.labels,
            "seconds_per_iteration": result.seconds / max(result.iterations_run, 1),
            "movement": {"mean_abs_pixel_change": result.movement, "barely_moved": result.barely_moved,
                         "threshold": BARELY_MOVED},
            "history": [list(h) for h in result.history], "warnings": warnings, **section})

    def evidence(self, attack: OptimizationAttack, result: LoopResult,
                 report: RunReport) -> tuple[Evidence, list[dict[str, Any]]]:
        """The truth-free evidence and the estimated band (fedaudit/verdict/; docs/methods/verdict.md), calibrated on
        ``proxies`` proxy batches when asked (fedaudit/jobs/proxies.py); also the proxies' records with images."""
        images = result.images.cpu()
        assert report.labels is not None and report.attack is not None
        out: dict[str, Any] = {"labels": report.labels.evidence,
                               "channels": channel_evidence(self.tm, report.attack.recovered)}
        if images.shape[0]:
            out["reconstruction"] = reconstruction_evidence(
                attack.engine, images, result.labels, result.restart_images, result.best_restart, self.session.seed,
                self.session.lpips_net, self.session.lpips_weights)
        rule = estimate(out)
        out["verdict"] = rule
        records: list[dict[str, Any]] = []
        if rule.get("score_db") is None:  # no images, or an exact channel: nothing for proxies to calibrate
            pass
        elif not self.proxies:
            out["proxies"] = {"requested": 0, "not_applicable": "no proxies: --proxies 0"}
        elif result.interrupted:  # Ctrl-C: write the best result so far now, not after P more runs
            out["proxies"] = {"requested": self.proxies, "not_applicable": "no proxies: the run was interrupted"}
        else:
            try:
                run = run_proxies(self, result.labels, self.proxies)
            except Exception as e:  # noqa: BLE001 - a proxy's failure, whatever it is, must never lose the real run
                run = {"requested": self.proxies, "proxies": [],
                       "not_applicable": f"no proxies: they failed ({type(e).__name__}: {e})"}
            records = run.pop("proxies")
            out["proxies"] = {**run, "measured": [{k: v for k, v in p.items() if k not in ("images", "truth", "pairs")}
                                                  for p in records]}
            if records:
                out["verdict"] = calibrated(rule, records)
        return parse(Evidence, out), records

    def write(self, out: OutputDir, result: ReconstructResult, truth: Truth | None = None, prefix: str = "") -> None:
        """reconstruction.safetensors (images, labels, what else was recovered), the proxies' grids and the report
        files."""
        proxy_pngs = [comparison_grid(p["images"], p["truth"], p["pairs"]) for p in result.proxies]
        evidence, attack = result.report.evidence, result.report.attack
        assert attack is not None
        if proxy_pngs and evidence is not None and evidence.proxies is not None:
            evidence.proxies.grids = [
                out.write_bytes(f"{prefix}proxies/{p['index']}.png", png) for p, png in zip(result.proxies, proxy_pngs)]
        if not prefix:
            out.write_bytes("reconstruction.safetensors", safetensors_bytes(
                {"images": result.images, "labels": torch.tensor(attack.recovered_labels, device="cpu"),
                 **result.tensors}, {"fedaudit.file": "reconstruction", "fedaudit.attack": self.attack}))
        write_report(out, result.report, result.images, truth.images if truth is not None else None, prefix=prefix,
                     proxy_pngs=proxy_pngs)

    def run_to(self, out: OutputDir, truth: Truth | None = None, inputs: dict[str, Any] | None = None) -> ReconstructResult:
        """Run and write the report folder (committed whole; the caller's ``with out:`` removes it on failure)."""
        result = self.run(truth, inputs)
        self.write(out, result, truth)
        return result
