"""Issue 88, "code runs from input": no file a user passes makes fedaudit start a program or import a module."""

from __future__ import annotations

import os
import stat

from .helpers import assert_one_error_line

EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 32 32\nnewpath 0 0 moveto 32 32 lineto stroke\nshowpage\n"


def test_an_eps_file_named_png_never_starts_ghostscript(cli, tmp_path, lenet_ckpt, monkeypatch):
    """Pillow hands EPS/PS to `gs` found on PATH: a file named .png holding EPS started it during `capture`. Now
    Pillow decodes only the raster formats fedaudit reads, sniffed by content: the file is refused, nothing runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "gs_ran"
    gs = bin_dir / "gs"
    gs.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    gs.chmod(gs.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    images = tmp_path / "images"
    images.mkdir()
    (images / "cat.png").write_bytes(EPS)
    res = cli("capture", lenet_ckpt, images, "-b", "1", "-o", tmp_path / "u.safetensors", "--image-labels", "3", expect=2)
    assert_one_error_line(res.stderr, "cannot read image")
    assert not marker.exists()
