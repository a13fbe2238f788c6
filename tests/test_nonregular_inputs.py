"""Inputs that are not regular files (a FIFO, a device) are refused up front: opening one can block forever."""

from __future__ import annotations

import os

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
