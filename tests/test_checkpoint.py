"""Checkpoint format: round trip and every malformed variant is a clear InputError."""

from __future__ import annotations

import pytest
import torch

from fedaudit.errors import InputError
from fedaudit.io.checkpoint import load_checkpoint, save_checkpoint, spec_metadata
from fedaudit.io.files import write_safetensors
from fedaudit.models import ModelSpec, build_model

from .helpers import CIFAR_SPEC


def _write(path, state, meta):
    write_safetensors(path, state, meta)
    return path


def test_roundtrip_keeps_weights_and_spec(lenet_ckpt):
    ck = load_checkpoint(lenet_ckpt)
    assert ck.spec == CIFAR_SPEC
    torch.manual_seed(0)
    ref = build_model(CIFAR_SPEC)
    assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), ck.model.state_dict().values()))
    assert len(ck.sha256) == 64


def test_arch_kwargs_roundtrip(tmp_path):
    spec = ModelSpec("resnet10", 10, (3, 32, 32), (0.5,), (0.5,), {"width": 4})
    save_checkpoint(tmp_path / "r.safetensors", build_model(spec), spec)
    assert load_checkpoint(tmp_path / "r.safetensors").spec.kwargs == {"width": 4}


@pytest.fixture
def state():
    torch.manual_seed(0)
    return dict(build_model(CIFAR_SPEC).state_dict())


def test_missing_tensor(tmp_path, state):
    state.pop("fc.bias")
    with pytest.raises(InputError, match="missing tensor 'fc.bias'"):
        load_checkpoint(_write(tmp_path / "c.safetensors", state, spec_metadata(CIFAR_SPEC)))


def test_extra_tensor(tmp_path, state):
    state["head.weight"] = torch.zeros(1)
    with pytest.raises(InputError, match="'head.weight' is not in the architecture"):
        load_checkpoint(_write(tmp_path / "c.safetensors", state, spec_metadata(CIFAR_SPEC)))


def test_wrong_shape(tmp_path, state):
    state["fc.weight"] = torch.zeros(10, 100)
    with pytest.raises(InputError, match=r"'fc.weight' has shape \[10, 100\]"):
        load_checkpoint(_write(tmp_path / "c.safetensors", state, spec_metadata(CIFAR_SPEC)))


def test_nan_weights(tmp_path, state):
    state["fc.weight"][0, 0] = float("nan")
    with pytest.raises(InputError, match="NaN or Inf"):
        load_checkpoint(_write(tmp_path / "c.safetensors", state, spec_metadata(CIFAR_SPEC)))


@pytest.mark.parametrize("key,value,message", [
    ("fedaudit.arch", None, "fedaudit.arch is missing"),
    ("fedaudit.arch", "lenet5", "unknown model 'lenet5'"),
    ("fedaudit.num_classes", "ten", "not an integer"),
    ("fedaudit.input_shape", "[3,32]", "must be \\[C,H,W\\]"),
    ("fedaudit.mean", "{oops", "not valid JSON"),
    ("fedaudit.arch_kwargs", "[1]", "must be a JSON dict"),
])
def test_bad_metadata(tmp_path, state, key, value, message):
    meta = spec_metadata(CIFAR_SPEC)
    if value is None:
        meta.pop(key)
    else:
        meta[key] = value
    with pytest.raises(InputError, match=message):
        load_checkpoint(_write(tmp_path / "c.safetensors", state, meta))


def test_input_too_small_for_the_network(tmp_path):
    spec = ModelSpec("torchvision.alexnet", 10, (3, 32, 32), (0.5,), (0.5,))
    model = build_model(spec)
    save_checkpoint(tmp_path / "a.safetensors", model, spec)
    with pytest.raises(InputError, match="cannot take input shape"):
        load_checkpoint(tmp_path / "a.safetensors")
