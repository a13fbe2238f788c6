"""Write a complete report folder: images/NNN.png, grid.png, report.json, report.html."""

from __future__ import annotations

from pathlib import Path

import torch

from fedaudit.io.files import dumps_json
from fedaudit.report.html import render_html
from fedaudit.report.images import grid, png_bytes
from fedaudit.report.outdir import OutputDir
from fedaudit.report.run_report import RunReport

GRID_COLUMNS = 8


def _grid_rows(recon: torch.Tensor, truth: torch.Tensor | None, pairs: list[tuple[int, int]] | None):
    if truth is None or pairs is None:
        cells = list(recon)
        return [cells[i:i + GRID_COLUMNS] for i in range(0, len(cells), GRID_COLUMNS)]
    matched = {r for _, r in pairs}
    top = [truth[t] for t, _ in pairs] + [None] * (recon.shape[0] - len(matched))
    bottom = [recon[r] for _, r in pairs] + [recon[r] for r in range(recon.shape[0]) if r not in matched]
    rows = []
    for i in range(0, len(bottom), GRID_COLUMNS):
        rows += [top[i:i + GRID_COLUMNS], bottom[i:i + GRID_COLUMNS]]
    return rows


def comparison_grid(recon: torch.Tensor, truth: torch.Tensor | None, pairs: list[tuple[int, int]] | None) -> bytes:
    """The PNG of the truth-above-reconstruction grid (reconstructions alone without truth)."""
    return png_bytes(grid(_grid_rows(recon, truth, pairs)))


def write_report(out: OutputDir, report: RunReport, recon: torch.Tensor, truth: torch.Tensor | None = None,
                 prefix: str = "", proxy_pngs: list[bytes] | None = None) -> Path | None:
    """Write everything into ``out`` and commit it; ``report.metrics`` (if any) supplies the matching.
    With ``prefix`` (a sub-folder, e.g. one audit cell) the files go there and the caller commits."""
    pngs = [png_bytes(img) for img in recon]
    report.images = [out.write_bytes(f"{prefix}images/{i:03d}.png", b) for i, b in enumerate(pngs)]
    pairs = report.metrics.pairs() if report.metrics is not None else None
    grid_png = None
    if recon.shape[0]:  # an attack may stop before images (RGLA without an inverter)
        grid_png = comparison_grid(recon, truth, pairs)
        report.grid = out.write_bytes(f"{prefix}grid.png", grid_png)
    report.html = "report.html"
    out.write_text(f"{prefix}report.json", dumps_json(report.to_json()))
    out.write_text(f"{prefix}report.html", render_html(report, grid_png, pngs, proxy_pngs))
    return None if prefix else out.commit()
