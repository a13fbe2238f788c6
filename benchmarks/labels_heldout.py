"""Held-out check of the label benchmark: the stored table's batches against other batches of the same models.

    .venv/bin/python -m benchmarks.labels --models convnet --states trained --batch-seed 1 \\
        --methods bias-count,zlg,ilrg,llg,llg-plus,rlu,hfgi,auto          # -> OUT/labels_batches1.json
    .venv/bin/python -m benchmarks.labels_heldout benchmarks/results/labels.json benchmarks/results/labels_batches1.json

`auto`'s routes were chosen on the stored batches (seed 0), so its numbers there are in-sample; the held-out
batches say whether they carry over. Per model and state (batches with B >= 8): `auto`'s mean InsAcc on each set
and on both pooled (with the standard error over batches), the best single method among the columns both sets ran,
and the cells (batch type x B) where `auto` is within 2 points of the best of those columns in that cell (on each
set and on both pooled). Writes markdown to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path


def _mean_se(values: list[float]) -> tuple[float, float]:
    """(mean, standard error of the mean)."""
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return statistics.fmean(values), se


def _cells_within(rows: list[dict], methods: list[str], margin: float = 0.02) -> tuple[int, int]:
    """(cells where auto is within ``margin`` of the best single method, cells)."""
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["dist"], r["B"]), []).append(r["results"])
    within = 0
    for results in cells.values():
        mean = {m: sum(x[m]["InsAcc"] for x in results) / len(results) for m in methods + ["auto"]}
        within += mean["auto"] >= max(mean[m] for m in methods) - margin - 1e-12
    return within, len(cells)


def compare(stored: dict, heldout: dict) -> str:
    keys = list(dict.fromkeys((r["model"], r["state"]) for r in heldout["rows"]))
    lines = ["| model | state | batches | auto stored | auto held out | auto pooled | best single (pooled) | "
             "cells within 2, stored | held out | pooled |", "|---|---|---|---|---|---|---|---|---|---|"]
    for key in keys:
        stored_rows, heldout_rows = ([r for r in table["rows"] if (r["model"], r["state"]) == key and r["B"] >= 8]
                                     for table in (stored, heldout))
        if not stored_rows:
            continue
        sets = (stored_rows, heldout_rows, stored_rows + heldout_rows)  # stored, held out, pooled
        methods = [m for m in heldout_rows[0]["results"] if m != "auto" and all(m in r["results"] for r in sets[2])]
        means = {m: statistics.fmean(r["results"][m]["InsAcc"] for r in sets[2]) for m in methods}
        best = max(methods, key=means.__getitem__)
        autos = [_mean_se([r["results"]["auto"]["InsAcc"] for r in rows]) for rows in sets]
        cells = [_cells_within(rows, methods) for rows in sets]
        lines.append(f"| {key[0]} | {key[1]} | {len(stored_rows)} + {len(heldout_rows)} | "
                     + " | ".join(f"{100 * m:.1f} +- {100 * se:.1f}" for m, se in autos)
                     + f" | {best} {100 * means[best]:.1f} | " + " | ".join(f"{w} / {n}" for w, n in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stored", type=Path, help="the stored table's JSON (benchmarks/results/labels.json)")
    ap.add_argument("heldout", type=Path, nargs="+", help="the held-out runs' JSON files (--batch-seed N)")
    args = ap.parse_args(argv)
    stored = json.loads(args.stored.read_text())
    heldout = {"rows": [r for p in args.heldout for r in json.loads(p.read_text())["rows"]]}
    print(compare(stored, heldout), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
