"""Every malformed input gets one clear stderr line and exit 2, never a traceback."""

from __future__ import annotations

import pytest
import torch

from fedaudit.io.files import read_safetensors, write_safetensors

from .helpers import assert_one_error_line, run_module, sample


def _rewrite(src, dst, mutate=None, meta_update=None):
    """A copy of ``src`` with its tensors mutated and/or metadata changed."""
    tensors, meta = read_safetensors(src, "input")
    meta.pop("format", None)
    if mutate:
        mutate(tensors)
    meta.update(meta_update or {})
    write_safetensors(dst, tensors, meta)
    return dst


def _copy_update(tmp_path, mutate=None, meta_update=None):
    return _rewrite(sample("lenet_b1")[1], tmp_path / "bad_update.safetensors", mutate, meta_update)


def _copy_checkpoint(tmp_path, mutate=None, meta_update=None):
    return _rewrite(sample("lenet_b1")[0], tmp_path / "bad_ckpt.safetensors", mutate, meta_update)


def _truncated(tmp_path):
    data = sample("lenet_b1")[1].read_bytes()
    path = tmp_path / "trunc.safetensors"
    path.write_bytes(data[: len(data) // 2])
    return path


CASES = {
    "truncated update": (lambda t: (sample("lenet_b1")[0], _truncated(t)), "truncated or corrupt"),
    "wrong shape": (lambda t: (sample("lenet_b1")[0], _copy_update(t, lambda d: d.__setitem__("fc.bias", torch.zeros(5)))), "has shape [5]"),
    "missing tensor in checkpoint": (lambda t: (_copy_checkpoint(t, lambda d: d.pop("fc.weight")), sample("lenet_b1")[1]), "missing tensor 'fc.weight'"),
    "NaN in update": (lambda t: (sample("lenet_b1")[0], _copy_update(t, lambda d: d["body.0.weight"].view(-1).__setitem__(0, float("nan")))), "NaN or Inf"),
    "unknown arch": (lambda t: (_copy_checkpoint(t, meta_update={"fedaudit.arch": "transformer9000"}), sample("lenet_b1")[1]),
                     "unknown model 'transformer9000'"),
    "bad metadata": (lambda t: (sample("lenet_b1")[0], _copy_update(t, meta_update={"fedaudit.batch_size": "many"})),
                     "fedaudit.batch_size is 'many', not an integer"),
    "swapped arguments": (lambda t: (sample("lenet_b1")[1], sample("lenet_b1")[0]), "arguments swapped"),
    "update of another model": (lambda t: (sample("lenet_b4")[0], sample("resnet10_b4")[1]), "was recorded against checkpoint sha256"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_inputs_exit_2_with_one_line(cli, tmp_path, case):
    make, fragment = CASES[case]
    ckpt, upd = make(tmp_path)
    res = cli("inspect", ckpt, upd, "-q", expect=2)
    assert_one_error_line(res.stderr, fragment)


def test_unwritable_outputs(cli, tmp_path):
    ckpt, upd, truth = sample("lenet_b1")
    res = cli("capture", ckpt, truth, "-b", "1", "-o", tmp_path / "no" / "dir" / "u.safetensors", expect=2)
    assert_one_error_line(res.stderr, "does not exist")
    (tmp_path / "file").write_text("x")
    res = cli("inspect", ckpt, upd, "-q", "-o", tmp_path / "file" / "i.json", expect=2)
    assert_one_error_line(res.stderr, "cannot write")


@pytest.mark.slow
def test_usage_errors_in_a_real_shell(tmp_path):
    for args, fragment in ((["frobnicate"], "No such command 'frobnicate'"),
                           (["capture", "a", "b", "-o", "x", "-b", "two"], "Invalid value for '--batch-size'")):
        proc = run_module(*args)
        assert proc.returncode == 2 and proc.stdout == ""
        assert_one_error_line(proc.stderr, fragment)
    proc = run_module("inspect", *sample("lenet_b1")[:2], "-q", "-o", tmp_path / "file" / "x.json")
    assert proc.returncode == 2
    assert_one_error_line(proc.stderr, "cannot write")
