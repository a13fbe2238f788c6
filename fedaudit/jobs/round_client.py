"""One client of a round audit: labels, then each planned attack, on that client's recorded update.

A module-level function of plain data (``audit_client(task) -> row``) so that a process pool or a Ray task can
run it anywhere fedaudit is installed. Each attack's report folder is written atomically under the client's
folder; ``result.json`` is written last and marks the client finished (``audit-round`` skips it on resume).
Errors become the row's ``error`` and ``exit`` (2 bad input, 3 runtime failure); they are not marked finished.
"""

from __future__ import annotations

import dataclasses
import json
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from fedaudit.errors import EXIT_INPUT, EXIT_RUNTIME, FedauditError
from fedaudit.io.files import atomic_write_bytes, dumps_json
from fedaudit.jobs.labels import LabelJob, label_check_brief
from fedaudit.jobs.reconstruct import ReconstructJob
from fedaudit.metrics.risk import worst_band
from fedaudit.report.outdir import OutputDir
from fedaudit.report.round_record import ClientAttack, ClientRow
from fedaudit.report.run_report import LabelReading
from fedaudit.session import AuxSource, Session

RESULT = "result.json"


def finished(client_dir: Path) -> dict[str, Any] | None:
    """The stored row of a finished client, or None."""
    path = client_dir / RESULT
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def audit_client(task: dict[str, Any]) -> dict[str, Any]:
    """``task``: client, checkpoint, update, out (the client's folder), plan (attacks, loop, labels, aux, ...)."""
    plan = task["plan"]
    if plan.get("threads"):
        torch.set_num_threads(int(plan["threads"]))
    row = ClientRow(client=task["client"], update=task["update"])
    t0 = time.perf_counter()
    try:
        session = Session.create(device=plan["device"], seed=plan["seed"], batch_size=plan["batch_size"],
                                 batch_size_mode="fill", quiet=True,
                                 force=True, allow_custom_arch=plan["allow_custom_arch"],
                                 lpips_net=plan["lpips_net"], lpips_weights=plan["lpips_weights"])
        aux = AuxSource(Path(plan["aux"]) if plan["aux"] else None, plan.get("aux_labels"), plan["dummy"], 1000, False)
        tm = session.load_threat_model(task["checkpoint"], task["update"], aux)
        row.threat_model = {"kind": tm.meta.kind, "batch_size": tm.batch_size, "local_steps": tm.meta.local_steps}
        out = Path(task["out"])
        out.mkdir(parents=True, exist_ok=True)
        # each attack recovers its labels itself, as `reconstruct` does, so that its report carries the label
        # evidence its estimated band uses; with no attack, the label job alone
        checks = int(plan.get("self_check") or 0)
        reading = None if plan["attacks"] else LabelReading.of_method(
            LabelJob(session, tm, plan["labels"], self_check=checks).run())
        attacks = []
        label_cache: dict[str, Any] = {}
        for attack in plan["attacks"]:  # the attacks share one label reading (and its self-check)
            loop = {"iterations": plan["iterations"], "restarts": plan["restarts"]}
            job = ReconstructJob(session, tm, attack, None, loop, labels=plan["labels"], label_self_check=checks,
                                 label_cache=label_cache, proxies=int(plan.get("proxies") or 0),
                                 gate=plan.get("gate") or "upper")
            folder = OutputDir(out / attack, force=True)
            with folder:
                result = job.run_to(folder, None, {"checkpoint": task["checkpoint"], "update": task["update"]})
            report = result.report
            reading = reading or report.labels
            gate, verdict = report.fail_on_band, report.verdict  # the estimated range's end that --gate picks
            assert gate is not None and verdict is not None and report.attack is not None
            attacks.append(ClientAttack(
                attack=attack, band=gate.band, band_source=gate.source_kind, band_point=gate.point, band_range=gate.range,
                confidence=verdict.confidence, p_higher=verdict.p_higher, distance=report.attack.distance,
                grid=f"{attack}/grid.png" if result.images.shape[0] else None, report=f"{attack}/report.html"))
        assert reading is not None
        evidence = reading.evidence or {}
        check = label_check_brief(reading.self_check())
        row = dataclasses.replace(
            row, labels=reading.labels, label_method=reading.chosen() or plan["labels"],
            label_evidence={k: evidence.get(k) for k in ("agreement", "determined")}, label_self_check=check,
            attacks=attacks, band=worst_band(a.band for a in attacks), status="ok", exit=0)  # type: ignore[arg-type]
    except FedauditError as exc:
        row.status, row.error = "error", str(exc)
        row.exit = exc.exit_code if exc.exit_code in (EXIT_INPUT, EXIT_RUNTIME) else EXIT_RUNTIME
    except Exception as exc:  # noqa: BLE001 - one client's internal failure must not stop the round
        row.status, row.error, row.exit = "error", f"internal error: {type(exc).__name__}: {exc}", EXIT_RUNTIME
        row.traceback = traceback.format_exc(limit=5)
    row.seconds = round(time.perf_counter() - t0, 2)
    if row.status == "ok":
        atomic_write_bytes(Path(task["out"]) / RESULT, dumps_json(row.to_json()).encode())
    return row.to_json()  # JSON across the process boundary (a worker, a Ray task): ClientRow.of reads it back
