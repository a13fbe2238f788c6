"""Built-in public image sets wherever aux images are taken (issue 65): --aux builtin:NAME and fedaudit aux export."""

from __future__ import annotations

import json

import pytest

from fedaudit.data.public import BUILTIN, builtin
from fedaudit.io.images import load_images

from .helpers import assert_one_error_line, sample


@pytest.mark.parametrize("name", list(BUILTIN))
def test_each_set_comes_at_the_models_input_shape(name):
    for shape in ((3, 32, 32), (1, 28, 28)):
        x, y = builtin(name, shape)
        assert tuple(x.shape[1:]) == shape and len(y) == len(x) and 0 <= float(x.min()) and float(x.max()) <= 1


def test_a_label_method_reads_a_builtin_set_and_an_unknown_one_is_refused(cli):
    ckpt, upd, truth = sample("lenet_b4")
    out = json.loads(cli("labels", "zlg", ckpt, upd, "--aux", "builtin:cifar10", "-q").stdout)
    assert out["aux"] == {"kind": "images", "count": 20, "labelled": True}
    out = json.loads(cli("labels", "zlg", ckpt, upd, "--aux", "builtin:cifar100", "-q").stdout)
    assert out["aux"]["labelled"] is False  # CIFAR-100's classes are not a 10-class model's
    res = cli("labels", "zlg", ckpt, upd, "--aux", "builtin:nope", expect=2)
    assert_one_error_line(res.stderr, "unknown built-in image set")


def test_aux_export_writes_a_file_other_commands_read(cli, tmp_path):
    out = tmp_path / "digits.safetensors"
    summary = json.loads(cli("aux", "export", "digits", "-o", out, "--input-shape", "3,32,32", "-q").stdout)
    assert summary == {"output": str(out), "name": "digits", "count": 5000, "shape": [3, 32, 32]}
    batch = load_images(out, (3, 32, 32))
    assert batch.images.shape == (5000, 3, 32, 32) and batch.labels is not None and int(batch.labels.max()) == 9
    res = cli("aux", "export", "digits", "-o", out, expect=2)  # never replaced without --force
    assert_one_error_line(res.stderr, "already exists")
