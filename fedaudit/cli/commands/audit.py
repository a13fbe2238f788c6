"""``fedaudit audit CKPT UPDATE --truth T --attacks ig,fedleak --defenses none,prune:0.5,dp:eps=100 -o OUT``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from fedaudit.cli.console import error_line, info_line
from fedaudit.cli.errors import fail_exit
from fedaudit.cli.shared import emit_result, flag, params, session_from
from fedaudit.cli.subcommands import command_with
from fedaudit.errors import EXIT_INTERRUPTED, EXIT_RUNTIME

PARAMS = params(
    "checkpoint", "update",
    flag("truth", Path, "The client's images and labels: the defenses' batch and the metrics' reference.", "--truth", "-t"),
    "truth_mismatch",
    flag("out", Path, "Audit folder to create (audit.json, audit.html, cells/).", "--out", "-o"),
    flag("attacks", str, "Comma-separated attacks (see 'fedaudit reconstruct').", default="ig,fedleak"),
    flag("defenses", str, "Comma-separated rows: none, prune:0.5, dp:eps=100:delta=1e-5, quantize:bits=8, soteria:0.5, "
         "refiner:critic=FILE; chain with '+'.", default="none"),
    flag("attack_options", Optional[list[str]], "Options of one attack, e.g. 'rgla:inverter=inv.safetensors' or "
         "'fedleak:lr=0.03:tv=0.2' (lr, schedule, iterations and restarts are accepted too); repeatable.", default=None),
    flag("iterations", Optional[int], "Iterations for every attack (default: each attack's own).", "--iterations", "-n", default=None),
    flag("restarts", Optional[int], "Restarts for every attack (default: each attack's own).", default=None),
    flag("labels", Optional[str], "Label method for every attack (default: each attack's own).", default=None),
    flag("aux", Optional[Path], "Auxiliary images for label methods that use them.", default=None),
    "aux_labels",
    flag("dummy", bool, "Gaussian dummies as auxiliary inputs (e.g. for hfgi labels).", default=False),
    "self_check",
    flag("eval_images", Optional[Path], "Labelled images (.safetensors with 'labels', or files + --eval-labels): accuracy "
         "after one step with the defended vs the true update.", default=None),
    flag("eval_labels", Optional[str], "Labels of --eval-images: '3,1,...' or 'names'.", default=None),
    flag("eval_lr", Optional[float], "Step size of that one step (default: the update's local lr, else 0.1).", default=None),
    "fail_on", "gate", "format", "lpips_net", "lpips_weights", "seed", "device", "force", "quiet", "progress", "allow_custom_arch", "ignore_base_mismatch",
)


def audit(**kw) -> None:
    """Run every attack against every defended copy of the update; one matrix (JSON + HTML with image grids)."""
    from fedaudit.io.truth import load_truth
    from fedaudit.jobs import AuditJob, AuxSource
    from fedaudit.jobs.audit import check_plan, eval_set, parse_attack_options, parse_defense_rows
    from fedaudit.report.outdir import OutputDir

    attack_names = [a.strip() for a in kw["attacks"].split(",") if a.strip()]
    rows = parse_defense_rows(kw["defenses"])
    per_attack = parse_attack_options(kw["attack_options"] or [])
    check_plan(attack_names, kw["labels"], kw["iterations"], kw["restarts"])
    session = session_from(kw)
    outdir = OutputDir(kw["out"], force=session.force)
    with outdir:
        tm = session.load_threat_model(kw["checkpoint"], kw["update"], AuxSource(kw["aux"], kw["aux_labels"], kw["dummy"], 1000, False))
        ev_x, ev_y = eval_set(kw["eval_images"], kw["eval_labels"], tm)
        job = AuditJob(session, tm, load_truth(kw["truth"]), rows, attack_names, per_attack, kw["iterations"], kw["restarts"],
                       kw["labels"], ev_x, ev_y, kw["eval_lr"], self_check=kw["self_check"], gate=kw["gate"].value,
                       truth_mismatch=kw["truth_mismatch"].value)
        job.preflight()  # every cell can start, the truth is this update's: refused before the first line
        info_line(f"audit: {len(rows)} defense rows x {len(attack_names)} attacks on {tm.spec.arch}, B={tm.batch_size}",
                  session.quiet)
        inputs = {k: kw[k] for k in ("checkpoint", "update", "truth", "eval_images")}
        doc = job.run_to(outdir, inputs, on_cell=lambda c: info_line(c.line(), session.quiet))
    emit_result(kw, "audit", AuditJob.summary(kw["out"], doc), doc.worst_band_for_fail_on)
    if doc.status == "interrupted":
        info_line("interrupted: the cells finished so far were written", session.quiet)
        raise typer.Exit(EXIT_INTERRUPTED)
    if doc.worst_band_for_fail_on:
        fail_exit(doc.worst_band_for_fail_on, kw["fail_on"].value, session.quiet, f"measured, {doc.gate} end of a cell's range")
    if doc.status == "incomplete":  # --fail-on never passes over a cell that did not run
        error_line(f"audit incomplete: {len(doc.failed)} planned rows/cells did not run ({'; '.join(doc.failed)}); "
                   "the finished cells are in audit.json")
        raise typer.Exit(EXIT_RUNTIME)


def register(app) -> None:
    app.command("audit")(command_with(PARAMS, audit))
