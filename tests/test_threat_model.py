"""Update -> averaged gradient conversion, restricted sharing, and update validation."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fedaudit.client.capture import CaptureConfig, capture_update
from fedaudit.errors import InputError
from fedaudit.io.checkpoint import load_checkpoint
from fedaudit.io.files import write_safetensors
from fedaudit.io.update import UpdateMeta, save_update
from fedaudit.models.normalize import normalize
from fedaudit.requirements import BATCH_SIZE, FINAL_BIAS_GRAD, FINAL_WEIGHT_GRAD, SINGLE_STEP, unmet
from fedaudit.threat_model import load_threat_model

from .helpers import CIFAR_SPEC


@pytest.fixture
def batch(cifar):
    x, y, _ = cifar
    return x[:8], y[:8]


def _grads(model, x, y):
    loss = F.cross_entropy(model(normalize(x, CIFAR_SPEC)), y)
    return dict(zip(dict(model.named_parameters()), torch.autograd.grad(loss, list(model.parameters()))))


def _tm(tmp_path, ckpt, tensors, meta, **kw):
    save_update(tmp_path / "u.safetensors", tensors, meta)
    return load_threat_model(ckpt, tmp_path / "u.safetensors", **kw)


def _close(a: dict, b: dict, rtol=1e-4):
    for k in b:
        scale = b[k].abs().max().clamp_min(1e-8)
        assert (a[k] - b[k]).abs().max() / scale < rtol, k


def test_gradient_mean_and_sum(tmp_path, lenet_ckpt, batch):
    model = load_checkpoint(lenet_ckpt).model
    g = _grads(model, *batch)
    tm = _tm(tmp_path, lenet_ckpt, g, UpdateMeta("gradient", reduction="mean", batch_size=8))
    _close(tm.gradient, g, 1e-7)
    summed = {k: v * 8 for k, v in g.items()}
    tm = _tm(tmp_path, lenet_ckpt, summed, UpdateMeta("gradient", reduction="sum", batch_size=8))
    _close(tm.gradient, g, 1e-6)
    with pytest.raises(InputError, match="needs fedaudit.batch_size"):
        _tm(tmp_path, lenet_ckpt, summed, UpdateMeta("gradient", reduction="sum"))


@pytest.mark.parametrize("kind,sign", [("delta", "local_minus_global"), ("delta", "global_minus_local"),
                                       ("weights", "local_minus_global")])
def test_one_step_delta_and_weights_equal_the_gradient(tmp_path, lenet_ckpt, batch, kind, sign):
    ck = load_checkpoint(lenet_ckpt)
    g = _grads(ck.model, *batch)
    cap = capture_update(ck.model, ck.spec, *batch, CaptureConfig(batch_size=8, lr=0.01, kind=kind, delta_sign=sign))
    _close(_tm(tmp_path, lenet_ckpt, cap.tensors, cap.meta).gradient, g, 1e-3)


@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.9, 0.0), (0.0, 5e-3), (0.5, 1e-3)])
def test_multi_step_delta_is_the_weighted_mean_gradient(tmp_path, lenet_ckpt, batch, momentum, wd):
    """g_hat = sum_j c_j g_j / sum_j c_j (ecosystem.md 1.4), with g_j taken at the j-th iterate."""
    ck = load_checkpoint(lenet_ckpt)
    x, y = batch
    lr, K = 0.05, 3
    model = copy.deepcopy(ck.model)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=wd)
    w0 = {k: v.detach().clone() for k, v in model.named_parameters()}
    per_step = []
    for k in range(K):
        xb, yb = x[(k % 2) * 4:(k % 2 + 1) * 4], y[(k % 2) * 4:(k % 2 + 1) * 4]
        g = _grads(model, xb, yb)
        per_step.append({n: g[n] + wd * p.detach() for n, p in model.named_parameters()})
        opt.zero_grad()
        F.cross_entropy(model(normalize(xb, CIFAR_SPEC)), yb).backward()
        opt.step()
    c = [(1 - momentum ** (K - j)) / (1 - momentum) if momentum else 1.0 for j in range(K)]
    expected = {n: sum(cj * s[n] for cj, s in zip(c, per_step)) / sum(c) - wd * w0[n] for n in w0}
    cap = capture_update(ck.model, ck.spec, x, y, CaptureConfig(batch_size=4, local_steps=K, lr=lr, momentum=momentum,
                                                                 weight_decay=wd))
    tm = _tm(tmp_path, lenet_ckpt, cap.tensors, cap.meta)
    _close(tm.gradient, expected, 2e-3)
    assert tm.meta.local_steps == K and SINGLE_STEP.why_not(tm) is not None


def test_adaptive_or_nesterov_optimisers_are_refused(tmp_path, lenet_ckpt, batch):
    ck = load_checkpoint(lenet_ckpt)
    cap = capture_update(ck.model, ck.spec, *batch, CaptureConfig(batch_size=8, lr=0.1, kind="delta"))
    cap.meta.optimizer = {"name": "adam"}
    with pytest.raises(InputError, match="only plain or heavy-ball SGD"):
        _tm(tmp_path, lenet_ckpt, cap.tensors, cap.meta)


def test_restricted_update_is_explicit(tmp_path, lenet_ckpt, batch):
    ck = load_checkpoint(lenet_ckpt)
    cap = capture_update(ck.model, ck.spec, *batch, CaptureConfig(batch_size=8, withhold=("fc.*",)))
    tm = _tm(tmp_path, lenet_ckpt, cap.tensors, cap.meta)
    assert tm.absent == ["fc.weight", "fc.bias"] and "fc.weight" not in tm.gradient
    reasons = unmet([FINAL_WEIGHT_GRAD, FINAL_BIAS_GRAD, BATCH_SIZE], tm)
    assert reasons == ["needs the output layer's weight gradient (fc.weight), which the update withholds",
                       "needs the output layer's bias gradient (fc.bias), which the update withholds"]


def test_update_for_another_checkpoint_is_refused(tmp_path, lenet_ckpt, batch):
    ck = load_checkpoint(lenet_ckpt)
    cap = capture_update(ck.model, ck.spec, *batch, CaptureConfig(batch_size=8), base_sha256="0" * 64)
    with pytest.raises(InputError, match="--ignore-base-mismatch"):
        _tm(tmp_path, lenet_ckpt, cap.tensors, cap.meta)
    assert _tm(tmp_path, lenet_ckpt, cap.tensors, cap.meta, check_base=False).present


@pytest.fixture
def grads(lenet_ckpt, batch):
    return _grads(load_checkpoint(lenet_ckpt).model, *batch)


def test_update_tensor_errors(tmp_path, lenet_ckpt, grads):
    meta = UpdateMeta("gradient", reduction="mean", batch_size=8)
    with pytest.raises(InputError, match="'head.bias' is not a parameter or buffer"):
        _tm(tmp_path, lenet_ckpt, {**grads, "head.bias": torch.zeros(3)}, meta)
    with pytest.raises(InputError, match=r"'fc.bias' has shape \[3\]"):
        _tm(tmp_path, lenet_ckpt, {**grads, "fc.bias": torch.zeros(3)}, meta)
    bad = {**grads, "fc.bias": torch.full((10,), float("inf"))}
    with pytest.raises(InputError, match="'fc.bias' contains NaN or Inf"):
        _tm(tmp_path, lenet_ckpt, bad, meta)
    assert _tm(tmp_path, lenet_ckpt, bad, meta, allow_nonfinite=True).nonfinite == ["fc.bias"]


@pytest.mark.parametrize("meta,message", [
    ({}, "no fedaudit metadata .*fedaudit import update"),  # a plain save: the error names the importer
    ({"fedaudit.kind": "diff"}, "expected one of gradient, delta, weights"),
    ({"fedaudit.kind": "gradient"}, "fedaudit.reduction is missing"),
    ({"fedaudit.kind": "delta", "fedaudit.local_steps": "1", "fedaudit.local_lr": "0.1"}, "delta_sign is missing"),
    ({"fedaudit.kind": "weights", "fedaudit.local_steps": "2"}, "local_lr is missing"),
    ({"fedaudit.kind": "weights", "fedaudit.local_steps": "2", "fedaudit.local_lr": "-1"}, "must be > 0"),
    ({"fedaudit.kind": "gradient", "fedaudit.reduction": "mean", "fedaudit.batch_size": "0"}, "must be >= 1"),
    ({"fedaudit.kind": "gradient", "fedaudit.reduction": "mean", "fedaudit.schema_version": "9"}, "not supported"),
    ({"fedaudit.file": "checkpoint"}, "arguments swapped"),
])
def test_bad_update_metadata(tmp_path, lenet_ckpt, grads, meta, message):
    write_safetensors(tmp_path / "u.safetensors", grads, meta)
    with pytest.raises(InputError, match=message):
        load_threat_model(lenet_ckpt, tmp_path / "u.safetensors")


def test_bn_buffers_of_a_delta_become_client_buffers(tmp_path):
    from fedaudit.io.checkpoint import save_checkpoint
    from fedaudit.models import ModelSpec, build_model

    spec = ModelSpec("convnet", 10, (3, 32, 32), (0.5,), (0.5,), {"width": 2})
    torch.manual_seed(0)
    model = build_model(spec)
    save_checkpoint(tmp_path / "c.safetensors", model, spec)
    x, y = torch.rand(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    cap = capture_update(model, spec, x, y, CaptureConfig(batch_size=4, local_steps=1, lr=0.1, kind="delta"))
    save_update(tmp_path / "u.safetensors", cap.tensors, cap.meta)
    tm = load_threat_model(tmp_path / "c.safetensors", tmp_path / "u.safetensors")
    # after one train-mode step: running_mean = 0.9 * 0 + 0.1 * batch mean of the first conv's output
    with torch.no_grad():
        first = model.features[0](normalize(x, spec))
    assert torch.allclose(tm.client_buffers["features.1.running_mean"], 0.1 * first.mean((0, 2, 3)), atol=1e-6)
    assert int(tm.client_buffers["features.1.num_batches_tracked"]) == 1
