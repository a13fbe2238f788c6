"""Reading benchmark records: JSON Lines files, one row a line (blank lines skipped)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def jsonl_rows(*paths: Path) -> list[dict]:
    """Every row of every file in ``paths``, in order."""
    return [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]


def append_row(path: Path, row: dict) -> None:
    """``row`` appended to the JSON Lines file ``path`` (its folder made): a grid resumes from what it wrote."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def grid_arguments(ap: argparse.ArgumentParser, out: Path) -> None:
    """The options every resumable grid takes: ``--threads`` (torch's, 1 by default), ``--table`` (print the table
    from the rows, run nothing) and ``--out`` (the rows' file, ``out`` by default)."""
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--out", type=Path, default=out)


def grid_rows(args: argparse.Namespace) -> list[dict]:
    """Sets torch's threads from ``args`` and returns the rows ``args.out`` already holds (none if it is absent)."""
    import torch

    torch.set_num_threads(args.threads)
    return jsonl_rows(args.out) if args.out.exists() else []
