"""The hostile battery, second part (issue 64): a disk that fills under every command that writes, and Ctrl-C at
every phase of a reconstruction. The contract each time: one line on stderr, the exit code (2 for a full disk, 130
for an interrupt), no temporary or staging file left, and nothing the user had before replaced or lost."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from .helpers import SAMPLES, assert_one_error_line, sample

LENET = SAMPLES / "lenet_b4"
FLOWER = SAMPLES / "flower_lenet_k2"

# command words (paths relative to the test's folder for outputs) -> the output it writes
WRITERS = {
    "labels": (["labels", "llg", LENET / "checkpoint.safetensors", LENET / "update.safetensors", "-o", "out.json"],
               "out.json"),
    "inspect": (["inspect", LENET / "checkpoint.safetensors", LENET / "update.safetensors", "-o", "out.json"],
                "out.json"),
    "defend": (["defend", "prune", LENET / "checkpoint.safetensors", LENET / "update.safetensors", "-o",
                "out.safetensors", "--ratio", "0.5"], "out.safetensors"),
    "capture": (["capture", LENET / "checkpoint.safetensors", LENET / "truth.safetensors", "-b", "4", "-o",
                 "out.safetensors"], "out.safetensors"),
    "init-checkpoint": (["init-checkpoint", "lenet", "-o", "out.safetensors"], "out.safetensors"),
    "import": (["import", "flower-npz", FLOWER / "client_arrays.npz", "-c", FLOWER / "checkpoint.safetensors", "-o",
                "out.safetensors", "--lr", "0.05", "-k", "2", "-b", "4"], "out.safetensors"),
    "aux export": (["aux", "export", "cifar10", "-o", "out.safetensors"], "out.safetensors"),
}


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if p.name.endswith(".tmp") or ".partial" in p.name
            or ".staging" in p.name]


@pytest.mark.parametrize("name", list(WRITERS))
@pytest.mark.parametrize("existing", [False, True])
def test_a_full_disk_is_one_line_and_loses_nothing(cli, tmp_path, monkeypatch, name, existing):
    words, output = WRITERS[name]
    words = [str(tmp_path / w) if w in (output,) else str(w) for w in words]
    target = tmp_path / output
    if existing:  # the user's file from an earlier run, replaced only by a complete new one (--force)
        target.write_bytes(b"the user's earlier result")
        words.append("--force")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    res = cli(*words, "-q", expect=2)
    assert_one_error_line(res.stderr, "No space left on device")
    assert not _leftovers(tmp_path), _leftovers(tmp_path)
    if existing:
        assert target.read_bytes() == b"the user's earlier result"
    else:
        assert not target.exists()


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


# where a reconstruction is interrupted -> what it patches
PHASES = {
    "loading the inputs": ("fedaudit.session.load_threat_model", None),
    "reading the labels": ("fedaudit.jobs.labels.LabelJob.run", None),
    "scoring against the truth": ("fedaudit.jobs.reconstruct.evaluate_images", None),
    "writing the report": ("fedaudit.report.write.render_html", None),
}


@pytest.mark.parametrize("phase", list(PHASES))
def test_ctrl_c_at_every_phase_is_one_line_and_leaves_no_half_folder(cli, tmp_path, monkeypatch, phase):
    target, _ = PHASES[phase]
    monkeypatch.setattr(target, _interrupt)
    ckpt, upd, truth = sample("lenet_b1")
    out = tmp_path / "out"
    res = cli("reconstruct", "ig", ckpt, upd, "-o", out, "--truth", truth, "-n", "3", "--proxies", "0", "-q",
              expect=130)
    assert_one_error_line(res.stderr, "interrupted")
    assert not _leftovers(tmp_path), _leftovers(tmp_path)
    if out.exists():  # a folder that exists is a whole one: its report parses and says how the run ended
        report = json.loads((out / "report.json").read_text())
        assert report["status"] in ("complete", "interrupted")
        assert (out / "report.html").is_file()
