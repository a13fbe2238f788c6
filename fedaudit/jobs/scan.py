"""The scan job: a checkpoint read as the server sent it, every check run, the document (fedaudit/report/types.py
``ScanResult``) printed as JSON or SARIF, or written as HTML (``fedaudit scan``, benchmarks/scan.py and the tests build scans here)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedaudit.report.document import now_iso
from fedaudit.report.types import ScanResult, build
from fedaudit.scan.finding import SEVERITIES, level


@dataclass
class ScanJob:
    checkpoint: Path
    base: Path | None = None
    allow_custom_arch: bool = False
    probe: torch.Tensor | None = None  # public images for D-SNR ([N, C, H, W] in [0, 1]); default: builtin sets
    probe_source: str = ""
    probe_size: int | None = None  # D-SNR's probe images (None: 16 up to 64 x 64 pixels, 8 above; 0: skip D-SNR)
    aux: Path | None = None  # the probe's images instead of the builtin sets (a folder, a file, builtin:NAME)

    def run(self) -> dict[str, Any]:
        from fedaudit import __version__
        from fedaudit.scan.run import scan_path

        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            found = scan_path(self.checkpoint, self.allow_custom_arch, self.base, self.probe, self.probe_source,
                              self.probe_size, self.aux)
        return build(ScanResult, {**found, "seconds_total": round(time.perf_counter() - t0, 3),
                                  "fedaudit_version": __version__, "created_at": now_iso()})


def fails(doc: dict[str, Any], fail_on: str) -> bool:
    """Whether the scan's worst finding is at or above ``fail_on`` (a severity, or "never")."""
    if fail_on == "never" or doc["severity"] == "none":
        return False
    if fail_on not in SEVERITIES:
        raise ValueError(f"--fail-on must be one of never, {', '.join(SEVERITIES)}")
    return level(doc["severity"]) >= level(fail_on)
