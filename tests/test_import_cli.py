"""``fedaudit import``: Flower positional .npz updates and plain state_dicts."""

from __future__ import annotations

import numpy as np
import torch

from fedaudit.client.capture import CaptureConfig, capture_update
from fedaudit.io.checkpoint import load_checkpoint
from fedaudit.io.files import write_safetensors
from fedaudit.threat_model import load_threat_model

from .helpers import CIFAR_SPEC, assert_one_error_line


def test_flower_weights_npz_matches_a_native_capture(cli, tmp_path, lenet_ckpt, cifar):
    ck = load_checkpoint(lenet_ckpt)
    x, y, _ = cifar
    cap = capture_update(ck.model, ck.spec, x[:4], y[:4], CaptureConfig(batch_size=4, lr=0.05, kind="weights"))
    # what a Flower NumPyClient returns: [v.numpy() for v in state_dict().values()], saved positionally
    arrays = [cap.tensors[k].numpy() for k in ck.model.state_dict()]
    np.savez(tmp_path / "fit.npz", *arrays)
    out = tmp_path / "u.safetensors"
    cli("import", "flower-npz", tmp_path / "fit.npz", "-c", lenet_ckpt, "-o", out, "--lr", "0.05", "-b", "4")
    native = tmp_path / "native.safetensors"
    from fedaudit.io.update import save_update

    save_update(native, cap.tensors, cap.meta)
    a, b = load_threat_model(lenet_ckpt, out), load_threat_model(lenet_ckpt, native)
    assert a.meta.source["framework"] == "flwr"
    for k in b.gradient:
        assert torch.equal(a.gradient[k], b.gradient[k])


def test_flower_npz_problems(cli, tmp_path, lenet_ckpt):
    ck = load_checkpoint(lenet_ckpt)
    arrays = [v.numpy() for v in ck.model.state_dict().values()]
    np.savez(tmp_path / "short.npz", *arrays[:-1])
    res = cli("import", "flower-npz", tmp_path / "short.npz", "-c", lenet_ckpt, "-o", tmp_path / "u.safetensors", "--lr", "1", expect=2)
    assert_one_error_line(res.stderr, "7 arrays", "8 tensors")
    np.savez(tmp_path / "swapped.npz", *arrays[::-1])
    res = cli("import", "flower-npz", tmp_path / "swapped.npz", "-c", lenet_ckpt, "-o", tmp_path / "u.safetensors", "--lr", "1", expect=2)
    assert_one_error_line(res.stderr, "array 0 has shape")
    np.savez(tmp_path / "objects.npz", np.array([{"evil": 1}], dtype=object))
    res = cli("import", "flower-npz", tmp_path / "objects.npz", "-c", lenet_ckpt, "-o", tmp_path / "u.safetensors", "--lr", "1", expect=2)
    assert_one_error_line(res.stderr, "pickled objects are refused")


def test_import_checkpoint_from_safetensors_and_pickle(cli, tmp_path):
    torch.manual_seed(3)
    from fedaudit.models import build_model

    model = build_model(CIFAR_SPEC)
    write_safetensors(tmp_path / "sd.safetensors", dict(model.state_dict()), {})
    cli("import", "checkpoint", tmp_path / "sd.safetensors", "--arch", "lenet", "--mean", "0.4914,0.4822,0.4465",
        "--std", "0.247,0.2435,0.2616", "-o", tmp_path / "c1.safetensors")
    assert load_checkpoint(tmp_path / "c1.safetensors").spec == CIFAR_SPEC
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    res = cli("import", "checkpoint", tmp_path / "sd.pt", "--arch", "lenet", "-o", tmp_path / "c2.safetensors", expect=2)
    assert_one_error_line(res.stderr, "--allow-pickle")
    cli("import", "checkpoint", tmp_path / "sd.pt", "--arch", "lenet", "--allow-pickle", "-o", tmp_path / "c2.safetensors")
    loaded = load_checkpoint(tmp_path / "c2.safetensors").model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())


def test_init_checkpoint_is_seeded(cli, tmp_path):
    for name in ("a", "b"):
        cli("init-checkpoint", "resnet10", "--arch-kwargs", '{"width": 4}', "--seed", "7", "-o", tmp_path / f"{name}.safetensors")
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    res = cli("init-checkpoint", "resnet10", "--arch-kwargs", "{width: 4}", "-o", tmp_path / "c.safetensors", expect=2)
    assert_one_error_line(res.stderr, "--arch-kwargs is not valid JSON")


def test_a_flower_round_of_a_torchvision_resnet18_keeps_every_shape(cli, tmp_path):
    """Issue 90: np.ascontiguousarray made each 0-d BatchNorm buffer (num_batches_tracked) shape [1], so every
    BatchNorm model's import exited 0 and then failed `inspect`. A ResNet-18 client's weights, as a Flower client
    sends them (0-d arrays included), import with every shape and inspect cleanly; the writer keeps them too."""
    from fedaudit.io.flower import read_npz_list, write_npz

    ckpt = tmp_path / "r18.safetensors"
    cli("init-checkpoint", "torchvision.resnet18", "-o", ckpt, "--input-shape", "3,32,32", "-q")
    model = load_checkpoint(ckpt).model
    local = [v.numpy() + (0.01 if v.is_floating_point() else 2) for v in model.state_dict().values()]
    assert any(np.ndim(a) == 0 for a in local)
    np.savez(tmp_path / "fit.npz", *local)
    out = tmp_path / "u.safetensors"
    cli("import", "flower-npz", tmp_path / "fit.npz", "-c", ckpt, "-o", out, "--lr", "0.05", "-k", "2", "-b", "4",
        "--bn-mode", "train", "-q")
    tm = load_threat_model(ckpt, out)
    assert tm.meta.source["framework"] == "flwr"
    cli("inspect", ckpt, out)
    write_npz(tmp_path / "again.npz", local)
    assert [np.shape(a) for a in read_npz_list(tmp_path / "again.npz")] == [np.shape(a) for a in local]
