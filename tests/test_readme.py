"""The README's set-up commands (install and test; then the Flower/Ray extras' install and tests) are exactly what CI
runs first; the linters CI runs after them are named."""

from __future__ import annotations

from .helpers import ROOT

LINTERS = [".venv/bin/ruff check .", ".venv/bin/mypy", ".ci/check-dist"]


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text().splitlines()
    start = readme.index("```bash")
    commands = readme[start + 1:start + 3]
    assert readme[start + 3] == "```"
    extras = readme.index("```bash", start + 1)
    commands += readme[extras + 1:extras + 3]
    assert readme[extras + 3] == "```" and "flower" in commands[2]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    steps = ci[ci.index('cd "$(dirname "$0")/.."') + 1:]
    assert steps == commands + LINTERS
    text = "\n".join(readme)
    assert "`ruff`" in text and "`mypy`" in text
