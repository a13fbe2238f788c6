"""Report folder: files, schema, self-contained HTML, atomic replacement, refusal to overwrite."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from fedaudit.errors import InputError
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.report.document import REPORT_SCHEMA_VERSION, new_report
from fedaudit.report.outdir import OutputDir
from fedaudit.report.write import write_report

from .helpers import sample


def _report(tmp_path, **options):
    ckpt, upd, truth = sample("lenet_b4")
    return new_report("test", {"checkpoint": ckpt, "update": upd, "missing": None}, options, seed=5)


def test_full_report_folder(tmp_path):
    g = torch.Generator().manual_seed(0)
    truth = torch.rand(4, 3, 32, 32, generator=g)
    recon = torch.cat([truth[[3, 1, 0, 2]], torch.rand(1, 3, 32, 32, generator=g)])  # one extra reconstruction
    report = _report(tmp_path, note="<script>alert(1)</script>")
    report["metrics"] = evaluate_images(recon, truth)
    out = write_report(OutputDir(tmp_path / "out"), report, recon, truth)
    assert sorted(p.name for p in (out / "images").iterdir()) == [f"{i:03d}.png" for i in range(5)]
    data = json.loads((out / "report.json").read_text())
    assert data["schema_version"] == REPORT_SCHEMA_VERSION and data["seed"] == 5
    assert len(data["inputs"]["checkpoint"]["sha256"]) == 64 and "missing" not in data["inputs"]
    assert data["images"][0] == "images/000.png" and data["grid"] == "grid.png"
    assert data["environment"]["torch"] == torch.__version__
    grid = Image.open(out / "grid.png")
    assert grid.size[1] > 2 * 64  # a truth row above a reconstruction row, cells upscaled to >= 64 px
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 1 + 4  # grid + one thumbnail per matched image
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "http://" not in html and "https://" not in html  # self-contained
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left behind


def test_existing_folder_is_refused_then_replaced_only_on_success(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("old")
    with pytest.raises(InputError, match="--force"):
        OutputDir(target)
    with pytest.raises(RuntimeError):
        with OutputDir(target, force=True) as out:
            out.write_text("report.json", "{}")
            raise RuntimeError("attack failed half way")
    assert (target / "keep.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    with OutputDir(target, force=True) as out:
        out.write_text("report.json", "{}")
        out.commit()
    assert [p.name for p in target.iterdir()] == ["report.json"]


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot write|not a folder"):
        OutputDir(blocker / "out")
    with pytest.raises(InputError, match="does not exist"):
        OutputDir(tmp_path / "a" / "b")
    with pytest.raises(InputError, match="not a folder"):
        OutputDir(blocker, force=True)
