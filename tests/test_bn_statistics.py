"""The BatchNorm-statistics channel: exact recovery for one local step, the mixture for several, the cumulative
mode, the FedSGD variant with attached buffers, and its refusals; the BN prior it feeds."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors import safe_open

from benchmarks.common import threat_model
from fedaudit.channels import bn_statistics
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, cifar10_samples
from fedaudit.errors import NotApplicable
from fedaudit.io.checkpoint import save_checkpoint
from fedaudit.io.files import write_safetensors
from fedaudit.models import ModelSpec, build_model
from fedaudit.models.normalize import normalize

from .helpers import assert_one_error_line

SPEC = ModelSpec("resnet10", 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD, {"width": 8})


def _model(momentum="default"):
    torch.manual_seed(0)
    model = build_model(SPEC)
    if momentum != "default":
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.momentum = momentum
    return model.eval()


def _direct(model, x, steps, batch, lr=0.1):
    """Each local step's batch mean and biased variance at every BN input, by running the client's training."""
    m = copy.deepcopy(model).train()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    modules = dict(m.named_modules())
    names = bn_statistics.bn_layers(m)
    per = {n: [] for n in names}
    for k in range(steps):
        seen = {}
        hooks = [modules[n].register_forward_hook(lambda mod, i, o, n=n, seen=seen: seen.__setitem__(n, i[0].detach().double()))
                 for n in names]
        xb = x[k * batch:(k + 1) * batch]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(normalize(xb, SPEC)), torch.zeros(batch, dtype=torch.long)).backward()
        opt.step()
        for h in hooks:
            h.remove()
        for n, v in seen.items():
            per[n].append((v.mean((0, 2, 3)), v.var((0, 2, 3), unbiased=False)))
    return per


def _rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("kind", ["delta", "weights"])
def test_one_local_step_gives_every_layer_exactly(kind):
    x, _, _ = cifar10_samples()
    model = _model()
    y = torch.zeros(4, dtype=torch.long)
    tm = threat_model(SPEC, model, x[:4], y, CaptureConfig(batch_size=4, local_steps=1, lr=0.1, kind=kind))
    stats = bn_statistics.recover(tm)
    direct = _direct(model, x[:4], 1, 4)
    assert stats.exact and stats.weights == pytest.approx([1.0]) and len(stats.layers) == 12
    assert stats.momentum == 0.1 and "metadata" in stats.momentum_source
    for name, s in stats.layers.items():
        mean, var = direct[name][0]
        assert _rel(s.mean, mean) < 1e-5 and _rel(s.var, var) < 1e-5, name
        assert torch.allclose(s.var_unbiased * (s.count - 1) / s.count, s.var)


def test_several_steps_give_the_momentum_weighted_mixture():
    x, _, _ = cifar10_samples()
    model = _model()
    y = torch.zeros(12, dtype=torch.long)
    tm = threat_model(SPEC, model, x[:12], y, CaptureConfig(batch_size=4, local_steps=3, lr=0.1, kind="delta"))
    stats = bn_statistics.recover(tm)
    m = 0.1
    want = [m * (1 - m) ** (3 - s) / (1 - (1 - m) ** 3) for s in (1, 2, 3)]
    assert not stats.exact and stats.weights == pytest.approx(want) and sum(stats.weights) == pytest.approx(1)
    direct = _direct(model, x[:12], 3, 4)
    for name, s in stats.layers.items():
        mix_mean = sum(w * d[0] for w, d in zip(stats.weights, direct[name]))
        mix_var = sum(w * d[1] for w, d in zip(stats.weights, direct[name]))  # equal n per step: unbiased mixes alike
        assert _rel(s.mean, mix_mean) < 1e-5 and _rel(s.var, mix_var) < 1e-4, name
    assert "not the union" in stats.describe()["what"]


def test_cumulative_mode_is_solved_from_num_batches_tracked():
    x, _, _ = cifar10_samples()
    model = _model(momentum=None)
    y = torch.zeros(8, dtype=torch.long)
    tm = threat_model(SPEC, model, x[:8], y, CaptureConfig(batch_size=4, local_steps=2, lr=0.1, kind="delta"))
    assert tm.meta.bn_momentum == "cumulative"
    stats = bn_statistics.recover(tm)
    assert stats.weights == [0.5, 0.5] and "num_batches_tracked" in stats.momentum_source
    direct = _direct(model, x[:8], 2, 4)
    for name, s in stats.layers.items():
        assert _rel(s.mean, 0.5 * (direct[name][0][0] + direct[name][1][0])) < 1e-5


def test_a_gradient_with_attached_buffers_and_the_refusals():
    x, _, _ = cifar10_samples()
    model = _model()
    y = torch.zeros(4, dtype=torch.long)
    tm = threat_model(SPEC, model, x[:4], y, CaptureConfig(batch_size=4, include_buffers=True))
    assert tm.meta.kind == "gradient" and bn_statistics.recover(tm).exact
    plain = threat_model(SPEC, model, x[:4], y, CaptureConfig(batch_size=4))
    assert bn_statistics.why_not(plain) == "no BN buffers in the update"
    with pytest.raises(NotApplicable, match="no BN buffers in the update"):
        bn_statistics.recover(plain)
    frozen = threat_model(SPEC, model, x[:4], y, CaptureConfig(batch_size=4, local_steps=1, lr=0.1, kind="delta", bn_mode="eval"))
    assert "eval mode" in bn_statistics.why_not(frozen)


def _files(tmp_path, include_buffers=True, meta_update=None, mutate=None):
    x, _, _ = cifar10_samples()
    model = _model()
    ckpt = tmp_path / "c.safetensors"
    save_checkpoint(ckpt, model, SPEC)
    from fedaudit.client.capture import capture_update
    from fedaudit.io.files import sha256_file

    cap = capture_update(model, SPEC, x[:4], torch.tensor([3, 8, 8, 0]),
                         CaptureConfig(batch_size=4, local_steps=1, lr=0.1, kind="delta", include_buffers=include_buffers),
                         base_sha256=sha256_file(ckpt))
    tensors = dict(cap.tensors)
    meta = cap.meta.to_metadata()
    meta.update(meta_update or {})
    if mutate:
        mutate(tensors)
    return ckpt, write_safetensors(tmp_path / "u.safetensors", tensors, meta)


def test_cli_states_the_channel_and_refuses_bad_input(cli, tmp_path):
    ckpt, upd = _files(tmp_path)
    info = cli.json(cli("inspect", ckpt, upd, "-q"))
    assert info["channels"]["bn_statistics"]["available"] and info["channels"]["bn_statistics"]["exact"]
    out = tmp_path / "r"
    cli("reconstruct", "ig", ckpt, upd, "-o", out, "-n", "3", "--bn-stats", "recovered", "-q")
    report = json.loads((out / "report.json").read_text())
    assert report["channels"]["bn_statistics"]["attack_prior"]["bn_stats"] == "recovered"
    (tmp_path / "m").mkdir()
    bad_momentum = _files(tmp_path / "m", meta_update={"fedaudit.bn_momentum": "0"})
    res = cli("inspect", *bad_momentum, "-q", expect=2)
    assert_one_error_line(res.stderr, "fedaudit.bn_momentum is 0.0; must be in (0, 1]")
    (tmp_path / "s").mkdir()
    wrong = _files(tmp_path / "s", mutate=lambda t: t.__setitem__("bn1.running_mean", torch.zeros(3)))
    res = cli("inspect", *wrong, "-q", expect=2)
    assert_one_error_line(res.stderr, "'bn1.running_mean' has shape [3]")
    (tmp_path / "n").mkdir()
    no_buffers = _files(tmp_path / "n", include_buffers=False)
    res = cli("reconstruct", "ig", *no_buffers, "-o", tmp_path / "r2", "--bn-stats", "recovered", "-q", expect=2)
    assert_one_error_line(res.stderr, "not applicable:", "no BN buffers in the update")
    with safe_open(str(no_buffers[1]), framework="pt") as fh:
        assert "fedaudit.bn_momentum" not in fh.metadata()
