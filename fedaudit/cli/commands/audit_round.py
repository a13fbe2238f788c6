"""``fedaudit audit-round ROUND_DIR -o OUT``: labels and attacks over every client update of a recorded round."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from fedaudit.cli.console import error_line, info_line
from fedaudit.cli.errors import fail_exit
from fedaudit.cli.shared import P, emit_result, flag, params
from fedaudit.cli.subcommands import command_with
from fedaudit.errors import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_RUNTIME, InputError

PARAMS = [
    P("round_dir", P.POSITIONAL_OR_KEYWORD, annotation=Annotated[Path, typer.Argument(
        help="A recorded round: checkpoint.safetensors and clients/*.safetensors (what the Flower recorder writes).")]),
    flag("out", Path, "Output folder (created, or resumed: finished clients are skipped).", "--out", "-o"),
    flag("attacks", str, "Comma-separated attacks per client (none: labels only).", default="ig"),
    flag("iterations", Optional[int], "Iterations per attack (default: each attack's own).", "--iterations", "-n", default=None),
    flag("restarts", Optional[int], "Restarts per attack (>= 2 adds restart agreement to the evidence).", default=None),
    flag("labels", str, "Label method (see 'fedaudit labels').", default="auto"),
    flag("aux", Optional[Path], "Auxiliary images for the label methods that use them.", default=None),
    flag("dummy", bool, "Gaussian dummies as auxiliary inputs.", default=False),
    flag("batch_size", Optional[int], "Batch size for updates that do not record it.", "--batch-size", "-b", default=None),
    flag("jobs", int, "Clients audited in parallel on this machine (spawned processes).", "--jobs", "-j", default=1),
    flag("threads", Optional[int], "Torch threads per client (default: 1 when parallel).", default=None),
    flag("ray", bool, "Run each client as a task on a local Ray (pip install 'fedaudit[ray]').", default=False),
    flag("ray_address", Optional[str], "Run on the Ray cluster at this address ('auto': the local 'ray start').", default=None),
    flag("gpus_per_task", float, "GPUs each Ray task asks for.", default=0.0),
    *params("aux_labels", "self_check", "proxies", "fail_on", "gate", "format", "lpips_net", "lpips_weights", "seed", "device", "quiet", "allow_custom_arch"),
]


def audit_round(**kw) -> None:
    """Audit every client of a recorded round (labels + attacks); one summary in JSON and HTML; resumable."""
    from fedaudit.jobs.audit_round import RoundAudit, RoundPlan

    attacks = [a.strip() for a in kw["attacks"].split(",") if a.strip() and a.strip() != "none"]
    if kw["jobs"] < 1:
        raise InputError(f"--jobs must be >= 1, got {kw['jobs']}")
    if kw["threads"] is not None and not 1 <= kw["threads"] <= 1024:  # issue 88: -1 ended in a RuntimeError
        raise InputError(f"--threads must be between 1 and 1024, got {kw['threads']}")
    parallel = kw["jobs"] > 1 or kw["ray"] or kw["ray_address"]
    plan = RoundPlan(attacks, kw["labels"], kw["iterations"], kw["restarts"], str(kw["aux"]) if kw["aux"] else None,
                     kw["dummy"], kw["batch_size"], kw["seed"], kw["device"], kw["lpips_net"].value,
                     str(kw["lpips_weights"]) if kw["lpips_weights"] else None, kw["allow_custom_arch"],
                     kw["threads"] or (1 if parallel else None), kw["aux_labels"], kw["self_check"],
                     kw["proxies"], kw["gate"].value)
    job = RoundAudit(kw["round_dir"], kw["out"], plan, kw["jobs"], kw["ray"], kw["ray_address"], kw["gpus_per_task"])

    doc = job.run(on_client=lambda row: info_line(row.line(), kw["quiet"]))
    server = doc.server or {}
    emit_result(kw, "audit-round", job.printed(doc), "very_high" if server.get("severity") == "high" else doc.worst_band,
                str(kw["round_dir"]))
    for f in server.get("findings", []):
        info_line(f"server: {f['tensor']}: {f['detail']} ({f['indicates']})", kw["quiet"])
    if doc.status == "interrupted":
        info_line("interrupted: finished clients are kept; run the same command again to resume", kw["quiet"])
        raise typer.Exit(EXIT_INTERRUPTED)
    if doc.worst_band:
        fail_exit(doc.worst_band, kw["fail_on"].value, kw["quiet"], f"estimated, {kw['gate'].value} end of a client's range")
    if server.get("severity") == "high":  # a tailored model leaks whatever the bands say: it fails any --fail-on
        fail_exit("very_high", kw["fail_on"].value, kw["quiet"], "a client received a model other than the global one")
    if doc.errors:
        codes = {r.exit for r in doc.errors}
        error_line(f"{len(doc.errors)} client(s) could not be audited: "
                   + "; ".join(f"{r.client}: {r.error}" for r in doc.errors))
        raise typer.Exit(EXIT_INPUT if codes == {EXIT_INPUT} else EXIT_RUNTIME)


def register(app) -> None:
    app.command("audit-round")(command_with(PARAMS, audit_round))
