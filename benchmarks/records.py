"""Reading benchmark records: JSON Lines files, one row a line (blank lines skipped)."""

from __future__ import annotations

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
