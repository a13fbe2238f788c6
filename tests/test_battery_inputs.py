"""Issue 88: no file a user passes makes fedaudit run code, and no user file is replaced or deleted."""

from __future__ import annotations

import os
import stat

import pytest

from .helpers import ROOT, assert_one_error_line

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


# a Hugging Face config.json's fields are checked before anything is sized from them (issue 88): each of these ended
# in exit 3 or an out-of-memory, or (attn_implementation) had transformers fetch kernel code
CONFIG_CASES = [
    ("n_embd", 1e7, "must be an integer"), ("n_embd", -96, "outside"), ("n_embd", "96", "must be an integer"),
    ("n_embd", 96.5, "must be an integer"), ("n_layer", 100_000, "outside"), ("n_positions", 10**10, "outside"),
    ("n_head", 0, "outside"), ("vocab_size", 10**12, "outside"), ("n_head", 7, "does not divide"),
    ("attn_implementation", "kernels-community/flash-attn", "not one fedaudit runs"),
    ("attn_implementation", "flash_attention_2", "not one fedaudit runs"),
    ("n_embd", 128, "the config builds"), ("n_layer", True, "must be an integer"),
]


@pytest.mark.parametrize("key,value,says", CONFIG_CASES, ids=[f"{k}={v!r}" for k, v, _ in CONFIG_CASES])
def test_a_hugging_face_config_is_bounded_before_the_model_is_built(cli, tmp_path, key, value, says):
    import json
    import shutil

    sample = ROOT / "sample_updates" / "gpt2_tiny_b4"
    folder = tmp_path / "model"
    shutil.copytree(sample / "checkpoint", folder)
    config = json.loads((folder / "config.json").read_text())
    config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    r = cli("inspect", folder, sample / "update.safetensors", expect=2)
    assert_one_error_line(r.stderr, says)


@pytest.mark.parametrize("r,says", [(10**9, "r must be an integer"), (2.5, "r must be an integer"),
                                    (8, "lora_A matrices have [4] rows")])
def test_a_lora_rank_is_bounded_by_the_adapters_own_tensors(tmp_path, r, says):
    import json

    from fedaudit.errors import InputError
    from fedaudit.io.text_adapter import load_text_model

    from .helpers import text_adapter

    base = ROOT / "sample_updates" / "gpt2_tiny_b4" / "checkpoint"
    adapter = text_adapter(base, tmp_path / "adapter", 4)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["r"] = r
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=says.replace("[", r"\[").replace("]", r"\]")):
        load_text_model(adapter, base)


@pytest.mark.parametrize("flag,value", [("--init-candidates", "1000000000"), ("--swap-burnin", "2"),
                                        ("--steps", "100000000"), ("--swap-candidates", "1000000000")])
def test_lamp_options_that_would_run_for_ever_are_refused_before_work(cli, tmp_path, flag, value):
    """Issue 88: `lamp --init-candidates 1e9` and `--swap-burnin 2` ran until killed."""
    s = ROOT / "sample_updates" / "gpt2_tiny_b4"
    res = cli("reconstruct", "lamp", s / "checkpoint", s / "update.safetensors", "-o", tmp_path / "o", flag, value,
              expect=2)
    assert_one_error_line(res.stderr, f"{flag} must be <=")
    assert not (tmp_path / "o").exists()


def test_a_text_truth_without_the_lines_dager_certified_is_refused(cli, tmp_path):
    """Issue 88: the truth of another update, its digest absent, measured "low" with exit 0; the certified lines
    reproduce this update, so a truth without them is the truth's error."""
    import dataclasses

    from fedaudit.io.text_truth import load_text_truth, save_text_truth

    s = ROOT / "sample_updates" / "gpt2_tiny_b4"
    lines = tmp_path / "other.txt"
    lines.write_text("Another client wrote these words.\nNothing here is in the update.\nA third line of text.\n"
                     "And the fourth one ends it.\n")
    cli("capture", s / "checkpoint", lines, "-b", "4", "-o", tmp_path / "u.safetensors", "--truth-out",
        tmp_path / "t.safetensors", "-q")
    truth = load_text_truth(tmp_path / "t.safetensors")
    save_text_truth(tmp_path / "t.safetensors", dataclasses.replace(truth, update_sha256=None))
    res = cli("reconstruct", "dager", s / "checkpoint", s / "update.safetensors", "-o", tmp_path / "o", "-t",
              tmp_path / "t.safetensors", expect=2)
    assert_one_error_line(res.stderr, "does not hold", "dager certified")
    assert not (tmp_path / "o").exists()
    res = cli("reconstruct", "dager", s / "checkpoint", s / "update.safetensors", "-o", tmp_path / "w", "-t",
              tmp_path / "t.safetensors", "--truth-mismatch", "warn", "-q")
    import json

    assert any("another update" in w for w in json.loads((tmp_path / "w" / "report.json").read_text())["warnings"])
