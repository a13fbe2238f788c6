"""``train-inverter`` and ``train-refiner-critic`` on the session's device (``--device``, auto by default).

As for the text attacks (tests/test_text_device.py): with no CUDA here, each training runs a second time with
PyTorch's default device set to ``meta``, where a tensor made without saying where fails against the CPU's; the
draws are made on the host, so both runs train the same weights. The CUDA rows run where a GPU is lent.
"""

from __future__ import annotations

import json

import pytest
import torch

from fedaudit.defenses.critic import CriticTraining, train_critic
from fedaudit.io.files import write_safetensors
from fedaudit.models.registry import final_linear
from fedaudit.models.train_inverter import InverterTraining, train_inverter

from .helpers import assert_one_error_line, plain_and_placed, same_tensors


def test_the_inverters_training_leaves_no_tensor_unplaced(cifar):
    from fedaudit.models import ModelSpec, build_model

    x, _, _ = cifar
    spec = ModelSpec("lenet", 10, (3, 32, 32), (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    torch.manual_seed(0)
    model = build_model(spec).eval()
    cfg = InverterTraining(epochs=1, batch_size=8, width=4)
    (plain, info), (placed, again) = plain_and_placed(lambda: train_inverter(model, spec, final_linear(model), x[:20], cfg))
    assert same_tensors(plain.state_dict(), placed.state_dict()) and again["train_mse"] == info["train_mse"]
    assert next(placed.parameters()).device.type == "cpu"  # returned on the host, ready to write


def test_the_critics_training_leaves_no_tensor_unplaced(cifar):
    x, _, _ = cifar
    cfg = CriticTraining(epochs=1, batch_size=8, width=4)
    (plain, info), (placed, again) = plain_and_placed(lambda: train_critic(x[:20], cfg))
    assert same_tensors(plain.state_dict(), placed.state_dict()) and again["calibration"] == info["calibration"]


def test_cuda_without_a_gpu_is_one_line_and_exit_2(cli, tmp_path, lenet_ckpt, cifar):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    x, _, _ = cifar
    write_safetensors(tmp_path / "imgs.safetensors", {"images": x[:10].contiguous()}, {})
    for args in (("train-inverter", lenet_ckpt, tmp_path / "imgs.safetensors", "-o", tmp_path / "inv.safetensors"),
                 ("train-refiner-critic", tmp_path / "imgs.safetensors", "-o", tmp_path / "critic.safetensors")):
        r = cli(*args, "--device", "cuda", expect=2)
        assert_one_error_line(r.stderr, "CUDA is not available")
        assert not args[args.index("-o") + 1].exists()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_both_trainings_run_on_cuda_from_the_cpus_start(cli, tmp_path, lenet_ckpt, cifar):
    x, _, _ = cifar
    write_safetensors(tmp_path / "imgs.safetensors", {"images": x.contiguous()}, {})
    runs = {}
    for device in ("cpu", "cuda"):
        inv = json.loads(cli("train-inverter", lenet_ckpt, tmp_path / "imgs.safetensors", "-o",
                             tmp_path / f"inv-{device}.safetensors", "--epochs", 2, "--width", 4, "--device", device,
                             "-q").stdout)
        crit = json.loads(cli("train-refiner-critic", tmp_path / "imgs.safetensors", "-o",
                              tmp_path / f"critic-{device}.safetensors", "--epochs", 2, "--width", 4, "--device",
                              device, "-q").stdout)
        runs[device] = inv, crit
    (inv_cpu, crit_cpu), (inv_gpu, crit_gpu) = runs["cpu"], runs["cuda"]
    assert inv_gpu["epochs_run"] == 2 and abs(inv_gpu["train_mse"] - inv_cpu["train_mse"]) < 0.1 * inv_cpu["train_mse"]
    assert abs(crit_gpu["train_mse"] - crit_cpu["train_mse"]) < 0.1 * crit_cpu["train_mse"]
