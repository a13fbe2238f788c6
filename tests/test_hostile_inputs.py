"""Hostile inputs a reviewer's CI meets (issue 64): non-regular files, all-zero updates, users' folders, option errors.

Each case asserts the contract: exit 0/1/2, one stderr line on error, nothing of the user's lost."""

from __future__ import annotations

import os

import pytest

from .helpers import assert_one_error_line, run_module, sample


def test_inspect_refuses_a_fifo_instead_of_hanging(tmp_path):
    ckpt, _, _ = sample("lenet_b1")
    fifo = tmp_path / "update.safetensors"
    os.mkfifo(fifo)
    res = run_module("inspect", ckpt, fifo)  # a subprocess with a time limit: a hang fails, it does not stall
    assert res.returncode == 2, res.stderr
    assert_one_error_line(res.stderr, "not a regular file")


def test_a_device_or_a_fifo_among_the_images_is_refused(cli, tmp_path):
    ckpt, _, _ = sample("lenet_b1")
    res = cli("reconstruct", "ig", ckpt, "/dev/null", "-o", tmp_path / "o", expect=2)
    assert_one_error_line(res.stderr, "not a regular file")
    images = tmp_path / "images"
    images.mkdir()
    os.mkfifo(images / "cat_3.png")
    res = cli("capture", ckpt, images, "--image-labels", "3", "-b", "1", "-o", tmp_path / "u.safetensors", expect=2)
    assert_one_error_line(res.stderr, "not a regular file")


def test_an_all_zero_update_is_bad_input_not_an_internal_error(cli, tmp_path):
    """It made every gradient distance 0 / 0 and the JSON writer crash on NaN (exit 3)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    ckpt, upd, _ = sample("lenet_b1")
    with safe_open(str(upd), "pt") as fh:
        meta = fh.metadata()
    zero = tmp_path / "zero.safetensors"
    save_file({k: v * 0 for k, v in load_file(str(upd)).items()}, str(zero), metadata=meta)
    res = cli("reconstruct", "ig", ckpt, zero, "-o", tmp_path / "o", "-n", "5", expect=2)
    assert_one_error_line(res.stderr, "every parameter's update is zero")
    cli("inspect", ckpt, zero)  # inspect describes it


def test_the_json_writer_encodes_non_finite_numbers_as_null_and_lists_them():
    import json

    from fedaudit.io.files import dumps_json

    doc = json.loads(dumps_json({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": -float("inf"), "e": 2}}))
    assert doc == {"a": None, "b": [1.0, None], "c": {"d": None, "e": 2}, "non_finite": ["$.a", "$.b[1]", "$.c.d"]}
    assert "non_finite" not in json.loads(dumps_json({"a": 1.5}))


def test_force_into_a_users_folder_exits_2_and_keeps_it(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b1")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "important.txt").write_text("keep me")
    res = cli("reconstruct", "ig", ckpt, upd, "-o", mine, "-n", "5", "--force", expect=2)
    assert_one_error_line(res.stderr, "not written by fedaudit")
    assert (mine / "important.txt").read_text() == "keep me"
    cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "-n", "5", "-q")
    cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "-n", "5", "-q", "--force")  # its own: replaced


def test_an_option_refused_inside_a_command_is_a_usage_error_not_an_internal_one(cli, tmp_path):
    import typer

    from fedaudit.cli.errors import handle_errors

    @handle_errors
    def command():
        raise typer.BadParameter("--thing must be >= 1")

    with pytest.raises(typer.Exit) as stopped:
        command()
    assert stopped.value.exit_code == 2
    res = cli("audit-round", tmp_path, "-o", tmp_path / "o", "--jobs", "0", expect=2)
    assert_one_error_line(res.stderr, "--jobs must be >= 1")
