"""The report.json document: schema-versioned, with inputs and their hashes, options, seed, timings."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.metadata
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedaudit import __version__
from fedaudit.io.files import sha256_file

REPORT_SCHEMA_VERSION = "1"


@dataclass
class Record:
    """What every record a run writes into its output folder starts with (typed in fedaudit/report/run_report.py,
    audit_record.py and round_record.py; :func:`new_report` fills it)."""

    schema_version: str
    tool: dict[str, Any]
    command: str
    created_at: str
    status: str
    inputs: dict[str, Any]
    options: dict[str, Any]
    seed: int | None
    environment: dict[str, Any]
    timings: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def now_iso() -> str:
    """UTC timestamp; SOURCE_DATE_EPOCH pins it for reproducible files."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    t = dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc) if epoch else dt.datetime.now(dt.timezone.utc)
    return t.replace(microsecond=0).isoformat()


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment(device: str = "cpu") -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),  # not imported: it costs a second of start-up
        "device": device,
        "cuda_device_name": torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else None,
        "cpu_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }


def describe_input(path: str | Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    p = Path(path)
    return {"path": str(p), "sha256": sha256_file(p) if p.is_file() else None}


def new_report(command: str, inputs: dict[str, str | Path | None], options: dict[str, Any],
               seed: int | None = None, device: str = "cpu") -> dict[str, Any]:
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "fedaudit", "version": __version__},
        "command": command,
        "created_at": now_iso(),
        "status": "complete",
        "inputs": {k: describe_input(v) for k, v in inputs.items() if v is not None},
        "options": options,
        "seed": seed,
        "environment": environment(device),
        "timings": {},
    }


class Timer:
    """``with Timer(report, "attack"):`` records wall seconds under ``report["timings"]``."""

    def __init__(self, report: dict[str, Any], name: str):
        self.report, self.name = report, name

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.report["timings"][self.name] = round(time.perf_counter() - self.t0, 4)
