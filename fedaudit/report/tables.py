"""Nested report data as HTML tables a reviewer can read (report.html and audit.html show no raw JSON): a dict is a
two-column table of its keys, a list of dicts a table with a column per key, a list of plain values one line;
booleans read yes/no, a missing value n/a, a float four significant digits. Every string is escaped."""

from __future__ import annotations

from html import escape
from typing import Any

MAX_ROWS = 64  # a longer list shows its first rows and how many more there are (report.json has them all)
MAX_DEPTH = 6  # deeper structure is shown as text


def cell(value: Any, depth: int = 0) -> str:
    """``value`` as the HTML inside one table cell."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (int, str)):
        return escape(str(value))
    if depth >= MAX_DEPTH:
        return escape(str(value))
    if isinstance(value, dict):
        return table(value, depth + 1) if value else "(none)"
    if isinstance(value, (list, tuple)):
        if not value:
            return "(none)"
        if all(isinstance(v, dict) for v in value):
            return records(list(value), depth + 1)
        if all(not isinstance(v, (dict, list, tuple)) for v in value):
            shown = ", ".join(cell(v, depth) for v in value[:MAX_ROWS])
            return shown + (f", ... ({len(value) - MAX_ROWS} more)" if len(value) > MAX_ROWS else "")
        return "<br>".join(cell(v, depth + 1) for v in value[:MAX_ROWS])
    return escape(str(value))


def table(data: dict[str, Any], depth: int = 0) -> str:
    """A dict as key / value rows."""
    rows = "".join(f"<tr><th class='l'>{escape(str(k))}</th><td class='l'>{cell(v, depth)}</td></tr>"
                   for k, v in data.items())
    return f"<table>{rows}</table>"


def records(items: list[dict[str, Any]], depth: int = 0) -> str:
    """A list of dicts as one table, a column per key (in order of first appearance)."""
    keys: list[str] = []
    for item in items:
        keys += [k for k in item if k not in keys]
    head = "".join(f"<th class='l'>{escape(str(k))}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td class='l'>{cell(item.get(k), depth)}</td>" for k in keys) + "</tr>"
                   for item in items[:MAX_ROWS])
    more = f"<tr><td colspan={len(keys)} class='l'>... {len(items) - MAX_ROWS} more in report.json</td></tr>" \
        if len(items) > MAX_ROWS else ""
    return f"<table><tr>{head}</tr>{body}{more}</table>"
