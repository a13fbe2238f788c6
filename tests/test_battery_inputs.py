"""Issue 88: no file a user passes makes fedaudit run code, and no user file is replaced or deleted."""

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


def test_the_checkpoint_file_never_replaces_a_users_file_or_an_input(cli, tmp_path):
    """Issue 88: `--checkpoint-file notes.txt` overwrote then deleted an existing user file, and naming the update
    being audited deleted the update. Both are refused before any work, and nothing is touched."""
    from .helpers import sample

    ckpt, upd, _ = sample("lenet_b1")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "o", "-n", "4", "--checkpoint-every", "2",
              "--checkpoint-file", notes, "--proxies", "0", "-q", expect=2)
    assert_one_error_line(res.stderr, "not an attack checkpoint fedaudit wrote")
    assert notes.read_text() == "mine" and not (tmp_path / "o").exists()
    copy = tmp_path / "update.safetensors"
    copy.write_bytes(open(upd, "rb").read())
    res = cli("reconstruct", "ig", ckpt, copy, "-o", tmp_path / "o", "-n", "4", "--checkpoint-every", "2",
              "--checkpoint-file", copy, "--proxies", "0", "-q", expect=2)
    assert_one_error_line(res.stderr, "one of this run's inputs")
    assert copy.exists()
    # a checkpoint fedaudit wrote may be named again (a resumed run writes where it resumed from)
    own = tmp_path / "own.ckpt.safetensors"
    cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "a", "-n", "4", "--checkpoint-every", "2",
        "--checkpoint-file", own, "--proxies", "0", "-q")


def _fifo(path):
    os.mkfifo(path)
    return path


def test_every_small_text_input_goes_through_one_reader_that_never_blocks(cli, tmp_path, tiny):
    """Issue 88: FIFOs as --labels-file, tokenizer.json, a text lines file and --lpips-weights hung (only the
    checkpoint and update paths were checked); /dev/zero as --labels-file ended in "out of memory". Each is refused
    with one line now, before anything is read (a hang here would stop the suite)."""
    import shutil

    from .helpers import sample

    ckpt, upd, truth = sample("lenet_b1")
    for labels_file in (_fifo(tmp_path / "labels.json"), "/dev/zero"):
        res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "o", "-n", "2", "--labels-file", labels_file,
                  "--proxies", "0", "-q", expect=2)
        assert_one_error_line(res.stderr, "not a regular file")
    res = cli("score", truth, "--truth", truth, "--lpips-weights", _fifo(tmp_path / "w.safetensors"), "-q", expect=None)
    assert res.exit_code in (0, 2) and "Traceback" not in res.stderr
    lines = _fifo(tmp_path / "lines.txt")
    res = cli("capture", tiny, lines, "-o", tmp_path / "u.safetensors", "-b", 1, expect=2)
    assert_one_error_line(res.stderr, "not a regular file")
    folder = tmp_path / "tok"
    shutil.copytree(tiny, folder)
    (folder / "tokenizer.json").unlink()
    _fifo(folder / "tokenizer.json")
    (tmp_path / "one.txt").write_text("Gradients can leak text.\n")
    res = cli("capture", folder, tmp_path / "one.txt", "-o", tmp_path / "v.safetensors", "-b", 1, expect=2)
    assert_one_error_line(res.stderr, "not a regular file")
    big = tmp_path / "huge.json"
    with open(big, "wb") as fh:
        fh.truncate(65 * 2**20)  # sparse: 65 MiB claimed, nothing written
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "o", "-n", "2", "--labels-file", big, "--proxies", "0",
              "-q", expect=2)
    assert_one_error_line(res.stderr, "MiB fedaudit reads")


def test_numbers_that_would_run_forever_or_crash_are_refused_before_work(cli, tmp_path):
    """Issue 88: `capture -k 1000000000` ran until killed; `audit-round --threads -1` ended in a RuntimeError."""
    from .helpers import sample

    ckpt, _, truth = sample("lenet_b4")
    res = cli("capture", ckpt, truth, "-b", "1", "-k", "1000000000", "--lr", "0.1", "-o", tmp_path / "k.safetensors",
              expect=2)
    assert_one_error_line(res.stderr, "above what fedaudit records")
    (tmp_path / "round").mkdir()
    res = cli("audit-round", tmp_path / "round", "-o", tmp_path / "r", "--threads", "-1", expect=2)
    assert_one_error_line(res.stderr, "--threads must be between 1 and 1024")


def test_audit_round_never_replaces_a_users_folder_and_removes_a_folder_it_made_on_failure(cli, tmp_path):
    """Issue 88: `audit-round -o DIR` over a user's folder replaced a user-written audit_round.json, and a run that
    failed after creating -o left the folder behind."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "audit_round.json").write_text('{"my": "notes"}')
    (tmp_path / "round" / "clients").mkdir(parents=True)
    res = cli("audit-round", tmp_path / "round", "-o", mine, expect=2)
    assert_one_error_line(res.stderr, "did not write")
    assert (mine / "audit_round.json").read_text() == '{"my": "notes"}'
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    res = cli("audit-round", tmp_path / "round", "-o", other, expect=2)
    assert_one_error_line(res.stderr, "folder of other files")


def test_a_failed_audit_round_leaves_no_folder_it_created(cli, tmp_path, monkeypatch):
    import shutil

    from fedaudit.errors import InputError
    from fedaudit.jobs import audit_round

    from .helpers import sample

    ckpt, upd, _ = sample("lenet_b4")
    (tmp_path / "round" / "clients").mkdir(parents=True)
    shutil.copy(ckpt, tmp_path / "round" / "checkpoint.safetensors")
    shutil.copy(upd, tmp_path / "round" / "clients" / "a.safetensors")

    def no_ray(*args, **kwargs):
        raise InputError("--ray needs the ray extra")

    monkeypatch.setattr(audit_round, "run_ray", no_ray)
    res = cli("audit-round", tmp_path / "round", "-o", tmp_path / "new", "--ray", "-n", "2", expect=2)
    assert_one_error_line(res.stderr, "ray")
    assert not (tmp_path / "new").exists()
