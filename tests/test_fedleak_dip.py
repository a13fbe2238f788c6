"""fedleak-dip: the untrained-generator parametrisation (shapes, median filter), its step rule, resume, and that
it reconstructs the LeNet cat from the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import ndimage

from fedaudit.attacks.image_generator import ImageGenerator, median_filter, start_size
from fedaudit.errors import InputError
from fedaudit.jobs import Session

from .helpers import attack_job, sample
from .test_reconstruct import _psnr_of_noise


def _dip(name="lenet_b1", loop=None, seed=0, policy=None, **overrides):
    """fedleak-dip (generator width 16 unless overridden) with the true labels: (job, attack, labels)."""
    return attack_job(name, "fedleak-dip", {"width": 16} | overrides, loop, Session(seed=seed), **(policy or {}))


@pytest.mark.parametrize("size,expected", [((32, 32), (4, 4, 3)), ((28, 28), (7, 7, 2)), ((224, 224), (7, 7, 5)),
                                           ((12, 20), (6, 10, 1)), ((5, 9), (5, 9, 0))])
def test_generator_start_size(size, expected):
    assert start_size(*size) == expected


@pytest.mark.parametrize("shape", [(3, 3, 32, 32), (2, 1, 28, 28), (1, 3, 12, 20)])
def test_generator_renders_images_in_range(shape):
    g = ImageGenerator(shape, width=8, code_dim=16)
    gen = torch.Generator().manual_seed(0)
    params, z = g.init(gen), g.code(gen)
    x = g(params, z)
    assert x.shape == shape and 0 < float(x.min()) and float(x.max()) < 1
    assert float(x.std()) > 1e-3  # the untrained net's output is not constant
    assert torch.equal(x, g(params, z))  # deterministic: no running statistics, no random layers
    assert ImageGenerator((1, 3, 128, 128), width=256).widths == [256, 256, 256, 256, 128, 64]


def test_median_filter_matches_scipy():
    x = torch.rand(2, 3, 9, 11, generator=torch.Generator().manual_seed(0))
    for k in (3, 5):
        want = ndimage.median_filter(x.numpy(), size=(1, 1, k, k), mode="mirror")  # torch "reflect" = scipy "mirror"
        assert np.allclose(median_filter(x, k).numpy(), want)
    assert torch.equal(median_filter(x, 0), x)


def test_step_is_the_blended_look_ahead_over_generator_weights():
    _, attack, _ = _dip(signed=False, blend=0.3)
    state = attack.init_state(torch.Generator().manual_seed(0))
    attack.optimizer(state, 0.01)
    variables = attack.variables(state)
    assert "z" in state and all(v is not state["z"] for v in variables) and not state["z"].requires_grad
    attack.closure(state, 0)
    got = [v.grad.clone() for v in variables]
    # by hand: d1 at theta, phi = -lr sign(d1) (descent, radius 1), d2 at theta + phi, step 0.7 d1 + 0.3 d2
    d, masks = attack._objective(attack.render(state))
    d1 = torch.autograd.grad(d, variables)
    ahead = [(v.detach() - 0.01 * g.sign()).requires_grad_(True) for v, g in zip(variables, d1)]
    d_ahead, _ = attack._objective(attack.render(state, ahead), masks)
    d2 = torch.autograd.grad(d_ahead, ahead)
    for g, a, b in zip(got, d1, d2):
        assert torch.allclose(g, 0.7 * a + 0.3 * b, atol=1e-6, rtol=1e-4)


def test_resume_continues_exactly(tmp_path):
    loop = {"iterations": 12, "lr": 0.01, "schedule": "cosine"}
    job, attack, labels = _dip(loop=loop, seed=2, policy={"checkpoint_every": 8, "checkpoint_path": tmp_path / "c.safetensors"})
    full = job.optimize(attack, labels)
    job, attack, labels = _dip(loop=loop, seed=2, policy={"resume": tmp_path / "c.safetensors"})
    resumed = job.optimize(attack, labels)
    assert resumed.resumed_from == {"restart": 0, "iteration": 8} and resumed.iterations_run == 4
    assert torch.allclose(resumed.images, full.images, atol=1e-6)


def test_bad_generator_options_are_input_errors():
    with pytest.raises(InputError, match="width"):
        _dip(width=2)
    with pytest.raises(InputError, match="median"):
        _dip(median=-1)


@pytest.mark.slow
def test_fedleak_dip_recovers_the_lenet_cat(cli, tmp_path):
    ckpt, upd, truth = sample("lenet_b1")
    out = tmp_path / "out"
    res = cli("reconstruct", "fedleak-dip", ckpt, upd, "-o", out, "--truth", truth, "-q", "-n", "300", "--width", "32")
    summary = json.loads(res.stdout)
    assert summary["summary"]["psnr"]["mean"] > max(22.0, _psnr_of_noise() + 6), summary["summary"]  # 25.7-26.4 dB, seeds 0-2
    report = json.loads((out / "report.json").read_text())
    assert report["attack"]["name"] == "fedleak-dip" and report["attack"]["iterations_run"] == 300
    assert report["options"]["attack_options"]["width"] == 32 and report["options"]["schedule"] == "cosine"
