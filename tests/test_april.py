"""APRIL's closed form on a small ViT (issue 67): one image exactly from the position- and patch-embedding gradients,
"not applicable" with the reason everywhere else."""

from __future__ import annotations

import json

import pytest
import torch

from fedaudit.attacks.april import solve
from fedaudit.client.capture import CaptureConfig, capture_update
from fedaudit.io.checkpoint import Checkpoint
from fedaudit.models import ModelSpec, build_model
from fedaudit.threat_model import ThreatModel

from .helpers import assert_one_error_line, sample

CIFAR = dict(num_classes=10, mean=(0.4914, 0.4822, 0.4465), std=(0.247, 0.2435, 0.2616))


def _tm(arch="vit-tiny", side=32, b=1, kwargs=None, **capture) -> tuple[ThreatModel, torch.Tensor]:
    spec = ModelSpec(arch, input_shape=(3, side, side), kwargs=kwargs or {}, **CIFAR)
    torch.manual_seed(0)
    model = build_model(spec).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.rand(b, 3, side, side, generator=g)
    y = torch.randint(10, (b,), generator=g)
    cap = capture_update(model, spec, x, y, CaptureConfig(batch_size=b, bn_mode="eval", **capture))
    tm = ThreatModel.from_tensors(Checkpoint.in_memory(spec, model), cap.tensors, cap.meta)
    return tm, x


@pytest.mark.parametrize("arch,side", [("vit-tiny", 32), ("vit-tiny64", 64)])
def test_the_closed_form_recovers_one_image_exactly(arch, side):
    from fedaudit.models.normalize import denormalize

    tm, x = _tm(arch, side)
    image, diag = solve(tm)
    got = denormalize(image.float(), tm.spec)
    assert float((got - x).abs().max()) < 1e-3  # float32 gradients: exact to their precision
    assert diag["relative_residual"] < 1e-5 and diag["rank"] == diag["patches"] == 64
    assert diag["consistency"]["class_token"] < 1e-5 and diag["consistency"]["patch_bias"] < 1e-5


def test_a_one_step_delta_gives_the_same_image():
    (tm_g, _), (tm_d, _) = _tm(), _tm(kind="delta", lr=0.01)
    a, _ = solve(tm_g)
    b, _ = solve(tm_d)
    # the delta theta_new - theta is recorded in float32: a step of 1e-4 on weights of 1e-2 keeps about 3 digits
    assert torch.allclose(a, b, atol=5e-3)


def test_april_through_the_cli_is_exact_and_banded_very_high(cli, tmp_path):
    _, _, truth = sample("lenet_b1")  # a CIFAR-10 photograph
    ckpt, upd, tr = tmp_path / "ck.safetensors", tmp_path / "up.safetensors", tmp_path / "tr.safetensors"
    cli("init-checkpoint", "vit-tiny", "-o", ckpt, "-q")
    cli("capture", ckpt, truth, "-b", "1", "-o", upd, "--truth-out", tr, "-q")
    out = cli.json(cli("reconstruct", "april", ckpt, upd, "-o", tmp_path / "r", "--truth", tr, "--proxies", "0",
                       "-q"))
    assert out["risk_band"] == "very_high" and out["summary"]["psnr"]["mean"] >= 40
    assert not out["barely_moved"]  # a closed form starts nowhere: no "barely moved" warning
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["attack"]["recovered"]["closed_form"]["route"] == "patch-embedding"
    info = cli.json(cli("inspect", ckpt, upd, "-q"))
    assert info["channels"]["position_embedding"]["closed_form"] and info["attacks"]["april"]["applicable"]


@pytest.mark.parametrize("case,fragment", [
    ("batch", "this update records a batch of 4"),
    ("withheld", "withholds the position embedding's gradient"),
    ("sincos", "no learnable position-embedding parameter"),
    ("steps", "needs a one-step (FedSGD) update"),
    ("cnn", "no learnable position-embedding parameter"),
    ("hidden-batch", "holds more than one image"),
])
def test_april_says_why_it_does_not_apply(cli, tmp_path, case, fragment):
    _, _, truth4 = sample("lenet_b4")
    _, _, truth1 = sample("lenet_b1")
    ckpt, upd = tmp_path / "ck.safetensors", tmp_path / "up.safetensors"
    kwargs = ["--arch-kwargs", '{"pos_embed": "sincos"}'] if case == "sincos" else []
    if case == "cnn":
        ckpt, upd, _ = sample("lenet_b1")
    else:
        cli("init-checkpoint", "vit-tiny", "-o", ckpt, *kwargs, "-q")
        capture = {"batch": ["-b", "4"], "hidden-batch": ["-b", "4"], "withheld": ["-b", "1", "--withhold", "pos_embed"],
                   "sincos": ["-b", "1"], "steps": ["-b", "2", "-k", "2", "--lr", "0.01"]}[case]
        cli("capture", ckpt, truth1 if case in ("withheld", "sincos") else truth4, *capture, "-o", upd, "-q")
    extra = ["--batch-size", "1", "--force"] if case == "hidden-batch" else []
    res = cli("reconstruct", "april", ckpt, upd, "-o", tmp_path / "r", "--proxies", "0", "-q", *extra, expect=2)
    assert_one_error_line(res.stderr, "not applicable: april", fragment)


def test_gradient_matching_runs_on_a_vit_with_gradvits_and_aprils_terms(cli, tmp_path):
    _, _, truth = sample("lenet_b4")
    ckpt, upd = tmp_path / "ck.safetensors", tmp_path / "up.safetensors"
    cli("init-checkpoint", "vit-tiny", "-o", ckpt, "-q")
    cli("capture", ckpt, truth, "-b", "4", "-o", upd, "-q")
    out = cli.json(cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "r", "-n", "4", "--patch-prior", "0.1",
                       "--pos-weight", "1", "--proxies", "0", "-q"))
    assert out["status"] == "complete" and out["iterations_run"] == 4
    lenet, lenet_upd, _ = sample("lenet_b1")
    res = cli("reconstruct", "ig", lenet, lenet_upd, "-o", tmp_path / "l", "-n", "4", "--patch-prior", "0.1", "-q",
              expect=2)
    assert_one_error_line(res.stderr, "--patch-prior needs a vision transformer")
    res = cli("reconstruct", "ig", lenet, lenet_upd, "-o", tmp_path / "m", "-n", "4", "--pos-weight", "1", "-q",
              expect=2)
    assert_one_error_line(res.stderr, "--pos-weight needs a vision transformer")


def test_the_patch_prior_counts_only_the_seams():
    from fedaudit.attacks.base import patch_seams_rows

    smooth_inside = torch.zeros(1, 3, 32, 32)
    smooth_inside[..., 4:, :] = 1.0  # one jump, on the seam between the first and second patch rows
    assert float(patch_seams_rows(smooth_inside, 4)) == pytest.approx(1 / 14)  # 7 + 7 seams, one of them jumps
    inside = torch.zeros(1, 3, 32, 32)
    inside[..., 2:, :] = 1.0  # a jump inside a patch: no seam crosses it
    assert float(patch_seams_rows(inside, 4)) == 0.0
    rows = patch_seams_rows(torch.stack([smooth_inside, inside]), 4)
    assert rows.shape == (2,) and float(rows[1]) == 0.0


def test_a_zero_head_passes_no_gradient_back_and_april_says_so():
    """torchvision's ViTs start with a zero head: nothing flows back to the embeddings at round 0 (measured on
    vit_b_16 at 224 px: a zero position-embedding gradient). The closed form says so instead of returning zeros."""
    from fedaudit.attacks.april import APRIL

    spec = ModelSpec("vit-tiny", input_shape=(3, 32, 32), **CIFAR)
    torch.manual_seed(0)
    model = build_model(spec).eval()
    torch.nn.init.zeros_(model.head.weight)
    x = torch.rand(1, 3, 32, 32)
    cap = capture_update(model, spec, x, torch.tensor([3]), CaptureConfig(batch_size=1, bn_mode="eval"))
    tm = ThreatModel.from_tensors(Checkpoint.in_memory(spec, model), cap.tensors, cap.meta)
    assert any("gradient is zero" in r for r in APRIL.why_not(tm))
