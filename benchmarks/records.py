"""Reading benchmark records: JSON Lines files, one row a line (blank lines skipped)."""

from __future__ import annotations

import json
from pathlib import Path


def jsonl_rows(*paths: Path) -> list[dict]:
    """Every row of every file in ``paths``, in order."""
    return [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]
