"""The README's two set-up commands are exactly what CI runs."""

from __future__ import annotations

from .conftest import ROOT


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text().splitlines()
    start = readme.index("```bash")
    commands = readme[start + 1:start + 3]
    assert readme[start + 3] == "```"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-2:] == commands
