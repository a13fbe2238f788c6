"""Report folder: files, schema, self-contained HTML, atomic replacement, refusal to overwrite."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from fedaudit.errors import InputError
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.report.document import new_report
from fedaudit.report.outdir import MARKER, OutputDir
from fedaudit.report.run_report import REPORT_SCHEMA_VERSION, RunReport
from fedaudit.report.write import write_report

from .helpers import sample


def _report(tmp_path, **options):
    ckpt, upd, truth = sample("lenet_b4")
    return new_report("score", {"checkpoint": ckpt, "update": upd, "missing": None}, options, seed=5)


def test_full_report_folder(tmp_path):
    g = torch.Generator().manual_seed(0)
    truth = torch.rand(4, 3, 32, 32, generator=g)
    recon = torch.cat([truth[[3, 1, 0, 2]], torch.rand(1, 3, 32, 32, generator=g)])  # one extra reconstruction
    report = RunReport.of({**_report(tmp_path, note="<script>alert(1)</script>"), "metrics": evaluate_images(recon, truth)})
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
    with OutputDir(target) as out:  # a report fedaudit wrote
        out.write_text("report.json", '{"old": 1}')
        out.commit()
    assert sorted(p.name for p in target.iterdir()) == [MARKER, "report.json"]
    with pytest.raises(InputError, match="--force"):
        OutputDir(target)
    with pytest.raises(RuntimeError):
        with OutputDir(target, force=True) as out:
            out.write_text("report.json", "{}")
            raise RuntimeError("attack failed half way")
    assert (target / "report.json").read_text() == '{"old": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder, no lock file left
    with OutputDir(target, force=True) as out:
        out.write_text("report.json", "{}")
        out.commit()
    assert (target / "report.json").read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_force_never_replaces_a_folder_fedaudit_did_not_write(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "important.txt").write_text("the user's")
    with pytest.raises(InputError, match="not written by fedaudit"):
        OutputDir(target, force=True)
    assert (target / "important.txt").read_text() == "the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_a_second_writer_of_the_same_output_is_refused_while_the_first_runs(tmp_path):
    first = OutputDir(tmp_path / "out")
    with pytest.raises(InputError, match="being written by another fedaudit run"):
        OutputDir(tmp_path / "out")
    first.write_text("report.json", "{}")
    first.commit()
    with OutputDir(tmp_path / "out", force=True) as out:  # the lock went with the commit
        out.commit()


def test_a_symlinked_output_writes_the_folder_it_points_to_and_leaves_nothing_behind(tmp_path):
    real = tmp_path / "real"
    with OutputDir(real) as out:
        out.commit()
    link = tmp_path / "link"
    link.symlink_to(real)
    with OutputDir(link, force=True) as out:
        out.write_text("report.json", "{}")
        out.commit()
    assert link.is_symlink() and (link / "report.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]  # no hidden .link.old-PID


def test_a_killed_runs_staging_folder_is_swept_by_the_next_run(tmp_path):
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()  # its PID names no live process now
    stale = tmp_path / f".out.{dead.pid}.abc.partial"
    stale.mkdir()
    (stale / "report.json").write_text("{}")
    with OutputDir(tmp_path / "out") as out:
        out.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot write|not a folder"):
        OutputDir(blocker / "out")
    with pytest.raises(InputError, match="does not exist"):
        OutputDir(tmp_path / "a" / "b")
    with pytest.raises(InputError, match="not a folder"):
        OutputDir(blocker, force=True)


def test_report_tables_escape_and_read_as_a_person_would():
    from fedaudit.report.tables import MAX_ROWS, cell, table

    html = table({"<script>": "<b>x</b>", "ok": True, "missing": None, "ratio": 0.123456, "nested": {"a": [1, 2]},
                  "rows": [{"k": 1}, {"k": 2, "j": False}], "long": list(range(MAX_ROWS + 5))})
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert ">yes<" in html and ">n/a<" in html and ">0.1235<" in html and ">no<" in html
    assert "(5 more)" in html and "<pre>" not in html
    assert cell([]) == "(none)" and cell({}) == "(none)"
