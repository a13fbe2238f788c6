"""``fedaudit capture`` from image folders and tensors: what is recorded, and the truth file."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from fedaudit.io.checkpoint import load_checkpoint
from fedaudit.io.files import read_safetensors, write_safetensors
from fedaudit.io.truth import load_truth
from fedaudit.models.normalize import normalize
from fedaudit.threat_model import load_threat_model

from .helpers import assert_one_error_line


@pytest.fixture
def image_folder(tmp_path, cifar):
    x, y, names = cifar
    folder = tmp_path / "imgs"
    folder.mkdir()
    for img, name in zip(x[:4], names[:4]):
        arr = (img.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        Image.fromarray(arr).save(folder / name)
    return folder


def test_capture_gradient_from_folder(cli, tmp_path, lenet_ckpt, image_folder, cifar):
    out, truth = tmp_path / "u.safetensors", tmp_path / "t.safetensors"
    res = cli("capture", lenet_ckpt, image_folder, "--image-labels", "names", "-b", "4", "-o", out, "--truth-out", truth)
    summary = cli.json(res)
    assert summary["kind"] == "gradient" and summary["batch_size"] == 4
    t = load_truth(truth)
    assert t.labels.tolist() == [3, 8, 8, 0] and torch.allclose(t.images, cifar[0][:4], atol=1 / 255)
    assert t.update_sha256 == summary["sha256"]
    # the recorded gradient is what the client computes on those images
    ck = load_checkpoint(lenet_ckpt)
    loss = F.cross_entropy(ck.model(normalize(t.images, ck.spec)), t.labels)
    expected = torch.autograd.grad(loss, list(ck.model.parameters()))
    tm = load_threat_model(lenet_ckpt, out)
    for (name, _), g in zip(ck.model.named_parameters(), expected):
        assert torch.allclose(tm.gradient[name], g, atol=1e-6)
    # ground truth never travels in the update
    tensors, meta = read_safetensors(out, "update")
    assert set(tensors) == {n for n, _ in ck.model.named_parameters()}
    assert not any("label" in k for k in meta)


def test_capture_fedavg_delta_from_tensor_file(cli, tmp_path, lenet_ckpt, cifar):
    x, y, _ = cifar
    src = tmp_path / "batch.safetensors"
    write_safetensors(src, {"images": (x[:8] * 255).round().to(torch.uint8), "labels": y[:8]}, {})
    out = tmp_path / "u.safetensors"
    res = cli("capture", lenet_ckpt, src, "-b", "4", "-k", "3", "--lr", "0.1", "-o", out, "--truth-out", tmp_path / "t.safetensors")
    assert cli.json(res)["kind"] == "delta"
    tm = load_threat_model(lenet_ckpt, out)
    assert (tm.meta.kind, tm.meta.local_steps, tm.meta.local_lr, tm.meta.batch_size) == ("delta", 3, 0.1, 4)
    assert load_truth(tmp_path / "t.safetensors").step.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_capture_withhold_and_resize(cli, tmp_path, lenet_ckpt, cifar):
    big = tmp_path / "big"
    big.mkdir()
    arr = (cifar[0][0].permute(1, 2, 0).numpy() * 255).astype(np.uint8)
    Image.fromarray(arr).resize((48, 40)).save(big / "cat_3.png")
    out = tmp_path / "u.safetensors"
    res = cli("capture", lenet_ckpt, big, "--image-labels", "names", "-b", "1", "-o", out, expect=2)
    assert_one_error_line(res.stderr, "48x40", "--resize")
    cli("capture", lenet_ckpt, big, "--image-labels", "names", "-b", "1", "-o", out, "--resize", "--withhold", "fc.*")
    tm = load_threat_model(lenet_ckpt, out)
    assert tm.absent == ["fc.weight", "fc.bias"]


@pytest.mark.parametrize("args,message", [
    (["--image-labels", "1,2,3", "-b", "4"], "3 labels for 4 images"),
    (["--image-labels", "1,2,3,99", "-b", "4"], "labels must be in [0, 9]"),
    (["--image-labels", "a,b", "-b", "4"], "comma-separated integers"),
    (["--image-labels", "names", "-b", "3"], "do not split into batches of 3"),
    (["--image-labels", "names", "-b", "2"], "exactly one batch"),
    (["--image-labels", "names", "-b", "4", "--kind", "delta"], "needs --lr"),
    (["-b", "4"], "no labels"),
])
def test_capture_bad_options(cli, tmp_path, lenet_ckpt, image_folder, args, message):
    res = cli("capture", lenet_ckpt, image_folder, *args, "-o", tmp_path / "u.safetensors", expect=2)
    assert_one_error_line(res.stderr, message)
    assert not (tmp_path / "u.safetensors").exists()


def test_capture_refuses_to_overwrite(cli, tmp_path, lenet_ckpt, image_folder):
    out = tmp_path / "u.safetensors"
    out.write_text("precious")
    res = cli("capture", lenet_ckpt, image_folder, "--image-labels", "names", "-b", "4", "-o", out, expect=2)
    assert_one_error_line(res.stderr, "--force")
    assert out.read_text() == "precious"
    cli("capture", lenet_ckpt, image_folder, "--image-labels", "names", "-b", "4", "-o", out, "--force")
    assert load_threat_model(lenet_ckpt, out).present
