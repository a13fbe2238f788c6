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


def test_a_plain_training_loops_gradient_and_delta_import_and_audit(cli, tmp_path, lenet_ckpt, cifar):
    """Issue 87/90: a reviewer's loop saves {name: param.grad} or new - old with safetensors.torch.save_file, no
    fedaudit metadata. Written exactly as docs/usage.md shows, both import and audit; without the import, the
    error names the command."""
    from safetensors.torch import save_file

    ck = load_checkpoint(lenet_ckpt)
    x, y, _ = cifar
    model, loss_fn = ck.model, torch.nn.CrossEntropyLoss()
    images = (x[:2] - torch.tensor(ck.spec.mean).view(1, -1, 1, 1)) / torch.tensor(ck.spec.std).view(1, -1, 1, 1)
    # --- as in docs/usage.md: one step's gradients ---
    model.zero_grad()
    loss_fn(model(images), y[:2]).backward()
    save_file({name: p.grad.detach().contiguous() for name, p in model.named_parameters()}, tmp_path / "grads.safetensors")
    # --- as in docs/usage.md: two local SGD steps' change of the weights ---
    old = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for i in range(2):
        opt.zero_grad()
        loss_fn(model(images[i:i + 1]), y[i:i + 1]).backward()
        opt.step()
    save_file({k: (v - old[k]).contiguous() for k, v in model.state_dict().items()}, tmp_path / "delta.safetensors")

    res = cli("inspect", lenet_ckpt, tmp_path / "grads.safetensors", expect=2)
    assert_one_error_line(res.stderr, "fedaudit import update")
    cli("import", "update", tmp_path / "grads.safetensors", "-c", lenet_ckpt, "-o", tmp_path / "g.safetensors",
        "--kind", "gradient", "-b", "2", "-q")
    cli("import", "update", tmp_path / "delta.safetensors", "-c", lenet_ckpt, "-o", tmp_path / "d.safetensors",
        "--kind", "delta", "-b", "1", "-k", "2", "--lr", "0.05", "-q")
    g = load_threat_model(lenet_ckpt, tmp_path / "g.safetensors")
    assert g.meta.source["framework"] == "pytorch" and g.batch_size == 2
    d = load_threat_model(lenet_ckpt, tmp_path / "d.safetensors")
    assert d.meta.kind == "delta" and d.meta.local_steps == 2
    res = cli("labels", "idlg", lenet_ckpt, tmp_path / "g.safetensors", expect=None)
    assert res.exit_code in (0, 2)  # iDLG reads B = 1 only: a clean answer either way, never a traceback
    cli("reconstruct", "ig", lenet_ckpt, tmp_path / "g.safetensors", "-o", tmp_path / "out", "-n", "5",
        "--proxies", "0", "-q")
    # the recipe the save cannot carry is named
    res = cli("import", "update", tmp_path / "delta.safetensors", "-c", lenet_ckpt, "-o", tmp_path / "x.safetensors",
              "--kind", "delta", "-b", "1", "-k", "2", expect=2)
    assert_one_error_line(res.stderr, "--lr")
    save_file({"fc9.weight": torch.zeros(3)}, tmp_path / "other.safetensors")
    res = cli("import", "update", tmp_path / "other.safetensors", "-c", lenet_ckpt, "-o", tmp_path / "y.safetensors",
              "-b", "1", expect=2)
    assert_one_error_line(res.stderr, "not in the checkpoint's model")


def test_a_plain_state_dict_given_as_a_checkpoint_names_the_import(cli, tmp_path, lenet_ckpt):
    """Issue 90: a raw state_dict said "metadata fedaudit.input_shape is missing", with no pointer to the importer."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in load_checkpoint(lenet_ckpt).model.state_dict().items()},
              tmp_path / "state.safetensors")
    res = cli("inspect", tmp_path / "state.safetensors", tmp_path / "state.safetensors", expect=2)
    assert_one_error_line(res.stderr, "fedaudit import checkpoint")


def test_a_torchvision_mnasnet_state_dict_imports(cli, tmp_path):
    """Issue 87: MNASNet checks its state's version, which safetensors does not keep: `import checkpoint` ended in exit
    3, "version should be set to 1 or 2 instead of None". The architecture's own versions are used."""
    import torchvision
    from safetensors.torch import save_file

    model = torchvision.models.get_model("mnasnet0_5", weights=None, num_classes=10)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "state.safetensors")
    cli("import", "checkpoint", tmp_path / "state.safetensors", "--arch", "torchvision.mnasnet0_5", "--input-shape",
        "3,32,32", "-o", tmp_path / "ck.safetensors", "-q")
    assert torch.equal(load_checkpoint(tmp_path / "ck.safetensors").model.state_dict()["layers.0.weight"],
                       model.state_dict()["layers.0.weight"])
    cli("capture", tmp_path / "ck.safetensors", "sample_updates/lenet_b1/truth.safetensors", "-b", "1", "--bn-mode",
        "eval", "-o", tmp_path / "u.safetensors", "-q")  # the capture restores the model's state with its versions
