"""A round audit: labels and attacks over every client update a recorded round holds, one summary.

The round folder is what ``fedaudit.integrations.flower.RecordingStrategy`` writes (any folder of this shape
works): ``checkpoint.safetensors`` (the global model the clients started from) and ``clients/*.safetensors`` (one
update per client, named by client). The output folder holds one folder per client (each attack's report, and
``result.json`` once the client is finished), ``audit_round.json`` and ``audit_round.html``. It is resumable: a
client with a ``result.json`` is not audited again; the summary is rewritten atomically after every client.

Bands are the reports' own: measured only with a truth, so here the estimated band (fedaudit/verdict/), per attack;
a client's band is the worst over its attacks; ``--fail-on`` tests the worst client. A client whose file is
corrupt or whose update cannot be attacked is that client's error row (exit 2 or 3 in the row); the others are
still audited.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fedaudit.attacks import ATTACKS
from fedaudit.attacks.base import check_budget
from fedaudit.errors import InputError
from fedaudit.io.files import atomic_write_bytes, dumps_json, path_component
from fedaudit.jobs.parallel import run_local, run_ray
from fedaudit.jobs.round_client import finished
from fedaudit.labels import LABEL_METHODS
from fedaudit.metrics.risk import BANDS, GATES, worst_band
from fedaudit.report.document import new_report
from fedaudit.report.round_html import render_round_html
from fedaudit.report.round_record import ROUND_SCHEMA_VERSION, ClientRow, RoundError, RoundRecord
from fedaudit.report.types import RoundClient, RoundSummary, build, pick


@dataclass
class RoundPlan:
    attacks: list[str]
    labels: str = "auto"
    iterations: int | None = None
    restarts: int | None = None
    aux: str | None = None
    dummy: bool = False
    batch_size: int | None = None
    seed: int = 0
    device: str = "cpu"
    lpips_net: str = "vgg"
    lpips_weights: str | None = None
    allow_custom_arch: bool = False
    threads: int | None = None
    aux_labels: str | None = None
    self_check: int = 0  # the label method's self-check per client (needs labelled aux images)
    proxies: int = 0  # proxy batches per client attack that calibrate its estimated band (fedaudit/jobs/proxies.py)
    gate: str = "upper"  # which end of each client's estimated range the round's --fail-on reads

    def check(self) -> None:
        for a in self.attacks:
            ATTACKS.get(a)
        LABEL_METHODS.get(self.labels)
        check_budget(self.iterations, self.restarts)
        if self.self_check < 0:
            raise InputError("--self-check must be >= 0")
        if self.proxies < 0:
            raise InputError(f"--proxies must be >= 0, got {self.proxies}")
        if self.gate not in GATES:
            raise InputError(f"--gate must be one of {', '.join(GATES)}, got {self.gate!r}")
        if self.batch_size is not None and self.batch_size < 1:
            raise InputError("--batch-size must be >= 1")


@dataclass
class RoundAudit:
    round_dir: Path
    out: Path
    plan: RoundPlan
    jobs: int = 1
    ray: bool = False
    ray_address: str | None = None
    gpus_per_task: float = 0.0
    rows: dict[str, ClientRow] = field(default_factory=dict)
    server: dict[str, Any] | None = None  # the round's consistency (fedaudit/scan/round.py), read before any client

    def printed(self, doc: RoundRecord) -> dict[str, Any]:
        """The JSON ``fedaudit audit-round`` prints (fedaudit/report/types.py ``RoundSummary``)."""
        return build(RoundSummary, {
            "out": str(self.out), "status": doc.status, "worst_client": doc.worst_client,
            "worst_band": doc.worst_band, "histogram": doc.histogram, "audited": doc.audited,
            "resumed": sum(r.resumed for r in doc.clients),
            "clients": [pick(RoundClient, r.to_json()) for r in doc.clients],
            "server_severity": (doc.server or {}).get("severity"),
            "server_findings": (doc.server or {}).get("findings", [])})

    def clients(self) -> list[tuple[str, Path]]:
        ckpt = self.round_dir / "checkpoint.safetensors"
        if not self.round_dir.is_dir():
            raise InputError(f"round folder {str(self.round_dir)!r} does not exist")
        if not ckpt.is_file():
            raise InputError(f"round folder {str(self.round_dir)!r} has no checkpoint.safetensors (the global model)")
        files = sorted((self.round_dir / "clients").glob("*.safetensors"))
        if not files:
            raise InputError(f"round folder {str(self.round_dir)!r} has no clients/*.safetensors")
        return client_names(files)

    def tasks(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The clients still to audit, and those already finished (whose stored rows are loaded)."""
        todo, done = [], []
        for name, path in self.clients():
            stored = stored_row(self.out / "clients" / name)
            if stored is not None:
                self.rows[name] = dataclasses.replace(stored, resumed=True)
                done.append(name)
                continue
            todo.append({"client": name, "checkpoint": str((self.round_dir / "checkpoint.safetensors").resolve()),
                         "update": str(path.resolve()), "out": str((self.out / "clients" / name).resolve()),
                         "plan": asdict(self.plan)})
        return todo, done

    def summary(self, status: str, engine: dict[str, Any], seconds: float) -> RoundRecord:
        rows = [self.rows[k] for k in sorted(self.rows)]
        ok = [r for r in rows if r.status == "ok"]
        worst = max(ok, key=lambda r: BANDS.index(r.band) if r.band else -1, default=None)
        record = new_report("audit-round", {}, {"plan": asdict(self.plan), "jobs": self.jobs, "ray": self.ray,
                                                "ray_address": self.ray_address, "gpus_per_task": self.gpus_per_task})
        record["timings"]["round"] = round(seconds, 2)
        return RoundRecord(
            **{**record, "schema_version": ROUND_SCHEMA_VERSION, "status": status}, round_dir=str(self.round_dir),
            engine=engine, clients=rows, audited=len(ok),
            errors=[RoundError(r.client, r.error, r.exit) for r in rows if r.status != "ok"],
            worst_client=None if worst is None else worst.client,
            worst_band=worst_band(r.band for r in ok),  # type: ignore[arg-type]
            histogram={b: sum(r.band == b for r in ok) for b in BANDS},
            band_source="estimated without the truth (docs/methods/verdict.md)", server=self.server)

    def write(self, doc: RoundRecord) -> None:
        atomic_write_bytes(self.out / "audit_round.json", dumps_json(doc.to_json()).encode())
        atomic_write_bytes(self.out / "audit_round.html", render_round_html(doc, self.out).encode())

    def run(self, on_client: Callable[[ClientRow], None] | None = None) -> RoundRecord:
        self.plan.check()
        if not self.out.parent.is_dir():
            raise InputError(f"cannot write {str(self.out)!r}: folder {str(self.out.parent)!r} does not exist")
        check_own_folder(self.out)
        todo, _ = self.tasks()
        self.server = consistency(self.round_dir)
        created = not self.out.exists()
        try:
            return self._run(todo, on_client)
        except BaseException as exc:  # a run that failed leaves no folder it created (issue 88); Ctrl-C is handled
            if created and not isinstance(exc, KeyboardInterrupt) and self.out.is_dir():
                shutil.rmtree(self.out, ignore_errors=True)
            raise

    def _run(self, todo: list[dict[str, Any]], on_client: Callable[[ClientRow], None] | None) -> RoundRecord:
        (self.out / "clients").mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        engine: dict[str, Any] = {"engine": "local", "jobs": self.jobs}

        def done(record: dict[str, Any]) -> None:
            row = ClientRow.of(record)
            self.rows[row.client] = row
            self.write(self.summary("running", engine, time.perf_counter() - t0))
            if on_client:
                on_client(row)

        status = "complete"
        try:
            if self.ray or self.ray_address:
                engine = run_ray(todo, self.ray_address, self.gpus_per_task, done, cpus=self.jobs if self.jobs > 1 else None)
            else:
                run_local(todo, self.jobs, done)
        except KeyboardInterrupt:
            status = "interrupted"
        doc = self.summary(status, engine, time.perf_counter() - t0)
        self.write(doc)
        return doc


def consistency(round_dir: Path) -> dict[str, Any]:
    """Whether every client got the stated global model: the round's findings and what was read (a model a server
    tailored to one client is a finding before any client is attacked; docs/scan.md)."""
    from fedaudit.scan.round import round_findings

    found, read = round_findings(round_dir)
    return {"severity": "high" if found else "none", "findings": [f.to_json() for f in found], "read": read}


def check_own_folder(out: Path) -> None:
    """``-o`` is a new folder or one audit-round wrote (to resume it): a user's folder, or one whose audit_round.json
    fedaudit did not write, is refused before anything is written (issue 88: a user's audit_round.json was replaced)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(f"-o {str(out)!r} exists and is not a folder")
    record = out / "audit_round.json"
    if record.exists():
        try:
            doc = json.loads(record.read_text()) if record.is_file() else None
        except (OSError, ValueError):
            doc = None
        if not (isinstance(doc, dict) and doc.get("command") == "audit-round" and "schema_version" in doc):
            raise InputError(f"-o {str(out)!r} holds an audit_round.json fedaudit did not write; name a new folder")
    elif any(p.name != "clients" for p in out.iterdir()):
        raise InputError(f"-o {str(out)!r} is a folder of other files, not an audit-round output; name a new folder")


def stored_row(client_dir: Path) -> ClientRow | None:
    """A finished client's stored row, or None where there is none or it cannot be read as one (a file from
    elsewhere, edited or damaged): that client is audited again rather than the round failing."""
    stored = finished(client_dir)
    if not isinstance(stored, dict):
        return None
    try:
        return ClientRow.of(stored)
    except (TypeError, ValueError, AttributeError):
        return None


def client_names(files: list[Path]) -> list[tuple[str, Path]]:
    """Each client file's name for its output folder: the file's stem as a safe path component (a file named
    '...safetensors' must not make a client '..' that writes into the round's output itself), with a short hash
    of the original stem where two stems sanitise alike."""
    names = [path_component(f.stem) for f in files]
    out = []
    for name, f in zip(names, files):
        if names.count(name) > 1 or name != f.stem:
            name = f"{name}-{hashlib.sha256(f.stem.encode()).hexdigest()[:8]}"
        out.append((name, f))
    return out
