"""``fedaudit scan CHECKPOINT``: is this checkpoint built to leak? Findings as JSON (or SARIF) on stdout."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from fedaudit.cli.console import check_output_file, clean, emit_json, err_console, info_line
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import AllowCustomArchOpt, BaseOpt, ForceOpt, OutputFormat, OutputOpt, QuietOpt
from fedaudit.errors import EXIT_LEAKAGE


class ScanFailOn(str, Enum):
    never = "never"
    info = "info"
    medium = "medium"
    high = "high"


def register(app) -> None:
    @app.command("scan")
    @handle_errors
    def scan(
        checkpoint: Annotated[Path, typer.Argument(help=(
            "The model a server sends: a fedaudit checkpoint, a plain safetensors state_dict, a Hugging Face folder, "
            "or a PEFT adapter folder (with --base)."), show_default=False)],
        fail_on: Annotated[ScanFailOn, typer.Option("--fail-on", help=(
            "Exit 1 when a finding is at or above this severity (high: a published construction's structure)."))]
        = ScanFailOn.never,
        fmt: Annotated[OutputFormat, typer.Option("--format", help=(
            "json (default) or sarif (SARIF 2.1.0, for code scanning)."))] = OutputFormat.json,
        html: Annotated[Optional[Path], typer.Option("--html", help="Also write the findings as one HTML page here.",
                                                     show_default=False)] = None,
        probe: Annotated[Optional[int], typer.Option("--probe", min=0, max=256, help=(
            "Public probe images for D-SNR (default: 16 up to 64 x 64 pixels, 8 above; 0 skips it)."),
            show_default=False)] = None,
        aux: Annotated[Optional[Path], typer.Option("--aux", help=(
            "D-SNR's probe images instead of the builtin public sets: a folder, an image, a .safetensors, or "
            "builtin:cifar10 | builtin:cifar100 | builtin:imagenet | builtin:digits."), show_default=False)] = None,
        output: OutputOpt = None, force: ForceOpt = False, quiet: QuietOpt = False,
        allow_custom_arch: AllowCustomArchOpt = False, base: BaseOpt = None,
    ) -> None:
        """Scan a global model before a client trains on it: rows copied into an imprint, bias ladders, trap weights,
        linearised stacks, fishing classifiers, SEER's Transmit-SNR and D-SNR, tensors outside the declared
        architecture. Each finding names the tensor, the statistic, its value, the benign range and what the attack
        recovers (docs/scan.md).
        """
        from fedaudit.io.files import atomic_write_text
        from fedaudit.jobs.scan import ScanJob, fails
        from fedaudit.report.sarif import scan_sarif
        from fedaudit.report.scan_html import render_scan_html

        check_output_file(output, force)
        check_output_file(html, force)
        doc = ScanJob(checkpoint, base=base, allow_custom_arch=allow_custom_arch, probe_size=probe, aux=aux).run()
        failed = fails(doc, fail_on.value)
        code = EXIT_LEAKAGE if failed else 0
        emit_json(scan_sarif(doc, code) if fmt == OutputFormat.sarif else doc, output)
        if html is not None:
            atomic_write_text(html, render_scan_html(doc))
        con = err_console(quiet)
        con.print(f"scan: severity {doc['severity']}" + (" (built to leak)" if doc["built_to_leak"] else "") +
                  f", {len(doc['findings'])} finding(s), {doc['seconds_total']:.1f} s")
        for f in doc["findings"]:
            con.print(f"  {f['severity']:<6} {clean(f['check'])}: {clean(f['tensor'])} = {f['value']} "
                      f"({clean(f['indicates'])})")
        for note in doc["notes"]:
            con.print(f"note: {clean(note)}")
        if failed:
            info_line(f"scan severity {doc['severity']} is at or above --fail-on {fail_on.value}", quiet)
            raise typer.Exit(code)
