"""The label self-check's finding for people: one line for the labels command's stderr, reconstruct's notes and the
report page, a brief one for the audit and round pages' cells (the JSON keeps the numbers;
fedaudit/verdict/label_self_check.py computes them)."""

from __future__ import annotations

from html import escape
from typing import Any


def summary_line(check: dict[str, Any] | None, reason: bool = True) -> str | None:
    """One line for people (stderr, the HTML reports): what the self-check found, or why it did not run; with
    ``reason``, why it finds the reading near a guess (where the line stands beside the warnings, they say it)."""
    if not check:
        return None
    if not check.get("clients"):
        return f"self-check: not applicable: {check.get('not_applicable')}"
    line = (f"self-check: on {check['clients']} simulated clients with these counts the method read "
            f"{check['InsAcc']:.2f} of the labels (an even guess {check['floor']:.2f}); on even ones "
            f"{check['even']['InsAcc']:.2f} (an even guess {check['even']['floor']:.2f})")
    return line + (f"; near a guess: {check['near_guess']}" if reason and check.get("near_guess") else "")


def self_check_html(brief: dict[str, Any] | None) -> str:
    """An audit cell's or a round client's self-check (``fedaudit.jobs.labels.label_check_brief``), as HTML."""
    if not brief:
        return ""
    if "not_applicable" in brief:
        return f"<br>label self-check: not applicable ({escape(str(brief['not_applicable']))})"
    near = ("<br><b>the labels may be no better than a guess: the band may under-report</b>"
            if brief["near_guess"] else "")
    return f"<br>label self-check: {brief['InsAcc']:.2f} estimated (an even guess {brief['floor']:.2f}){near}"
