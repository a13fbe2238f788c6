"""Every shell block of the README after its set-up commands runs word for word, in order, on the shipped samples
(issue 65): the Quick start cannot drift from the tool again. Budgets are capped by ``FEDAUDIT_MAX_ITERATIONS`` (the README
need not show it) and one proxy batch runs instead of three; the set-up blocks are what CI itself runs (tests/test_readme.py).
The ``fedaudit`` the script calls is a client of a fork server (tests/forkserver.py) that imported the CLI once: the
same words, streams and exit codes without a torch import per command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .helpers import ROOT


def readme_blocks(doc: str = "README.md", start: str = "## Quick start") -> list[str]:
    text = (ROOT / doc).read_text()
    body = text[text.index(start):]
    blocks, inside, lines = [], False, []
    for line in body.splitlines():
        if line.strip() == "```bash":
            inside, lines = True, []
        elif line.strip() == "```" and inside:
            inside = False
            blocks.append("\n".join(lines))
        elif inside:
            lines.append(line)
    return blocks


def test_the_readme_has_runnable_blocks_and_no_placeholders():
    blocks = readme_blocks()
    assert len(blocks) >= 4
    for block in blocks:
        for word in ("CKPT", "UPDATE", "my_images/"):
            assert word not in block, (word, block)
        for sample in re.findall(r"sample_updates/(\w+)", block):  # every sample named is shipped
            assert (ROOT / "sample_updates" / sample).is_dir(), sample


@pytest.mark.slow
def test_every_readme_block_runs_verbatim(tmp_path):
    for name in ("sample_updates", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}", "NO_COLOR": "1",
           "FEDAUDIT_MAX_ITERATIONS": "5", "FEDAUDIT_PROXIES": "1", "PYTHONPATH": str(tmp_path)}
    forkserver = Path(__file__).with_name("forkserver.py")
    sock = Path(tempfile.mkdtemp(prefix="fa-")) / "s"  # a Unix socket's path must stay short
    server = subprocess.Popen([sys.executable, str(forkserver), "serve", str(sock)], cwd=tmp_path, env=env)
    try:
        while not sock.exists():
            assert server.poll() is None, "the fork server did not start"
            time.sleep(0.05)
        script = "\n".join(["set -euo pipefail",
                            f'fedaudit() {{ "{sys.executable}" "{forkserver}" client "{sock}" "$@"; }}',
                            *[b.replace("source .venv/bin/activate", ": venv on PATH") for b in readme_blocks()],
                            # docs/text.md's block after the README's, in the same folder (issue 90: its files
                            # collided with the Quick start's and it named a file nobody ships)
                            *readme_blocks("docs/text.md", "# ")])
        res = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=900)
    finally:
        server.kill()
        server.wait()
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    for made in ("inspect.json", "labels.json", "quick/report.html", "quick/proxies/0.png", "quick_scored/report.html",
                 "measured.json", "my_update.safetensors", "my_truth.safetensors", "my_fedavg.safetensors", "my_report/report.html",
                 "gdbr.json", "zlg.json", "bn_auto.json", "bn_count.json", "matrix/audit.html", "round.json",
                 "dager_out/report.html", "tag_out/report.json", "my_text_update.safetensors",
                 "my_text_truth.safetensors"):
        assert (tmp_path / made).exists(), made
    # the Flower import of the shipped client arrays is the shipped update, byte for byte (its truth names it)
    flower = ROOT / "sample_updates" / "flower_lenet_k2" / "update.safetensors"
    assert (tmp_path / "flower_update.safetensors").read_bytes() == flower.read_bytes()
