"""--help a person can scan (issue 65): every method's own options first, then the shared flags by panel."""

from __future__ import annotations

import pytest

from fedaudit.attacks import ATTACKS
from fedaudit.labels import LABEL_METHODS

PANELS = ("Labels", "Optimisation", "Verdict", "Output", "Inputs and device")


def panel_titles(text: str) -> list[str]:
    return [line.split("─ ", 1)[1].split(" ─")[0] for line in text.splitlines() if line.startswith("╭─ ")]


@pytest.mark.parametrize("name", [n for n, _ in ATTACKS])
def test_every_attacks_help_groups_its_flags(cli, name):
    titles = panel_titles(cli("reconstruct", name, "--help").stdout)
    own = [f"{name} options"] if ATTACKS.get(name).options else []
    assert [t for t in titles if t not in ("Arguments", "Options")] == own + list(PANELS), titles


@pytest.mark.parametrize("name", [n for n, _ in LABEL_METHODS])
def test_every_label_methods_help_puts_its_own_options_first(cli, name):
    titles = panel_titles(cli("labels", name, "--help").stdout)
    rest = [t for t in titles if t not in ("Arguments", "Options")]
    if LABEL_METHODS.get(name).options:
        assert rest[0] == f"{name} options", titles
    assert set(rest) - {f"{name} options"} <= set(PANELS), titles
