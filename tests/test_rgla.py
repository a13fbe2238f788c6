"""RGLA: cross-entropy inversion recovers each sample's output-layer input exactly (repeated labels included),
MLP inputs follow analytically, a small CPU-trained inverter decodes the features, and the guards hold."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from fedaudit.attacks.ce_inversion import CEInversion
from fedaudit.data.offline import MNIST_MEAN, MNIST_STD, mnist_digits
from fedaudit.io.checkpoint import save_checkpoint
from fedaudit.io.files import read_safetensors, write_safetensors
from fedaudit.io.truth import load_truth
from fedaudit.metrics.features import feature_recovery
from fedaudit.metrics.psnr import psnr
from fedaudit.models import ModelSpec, build_model

from .helpers import assert_one_error_line, sample

FAST = ["-n", "100", "--restarts", "2", "-q"]


def _head_batch(labels, seed=0, h=40):
    """A random-init output layer (near-uniform softmax) on non-negative features, and its gradient."""
    g = torch.Generator().manual_seed(seed)
    f = torch.rand(len(labels), h, generator=g, dtype=torch.float64)
    W = (0.05 * torch.randn(10, h, generator=g, dtype=torch.float64)).requires_grad_(True)
    b = (0.01 * torch.randn(10, generator=g, dtype=torch.float64)).requires_grad_(True)
    y = torch.tensor(labels)
    gW, gb = torch.autograd.grad(F.cross_entropy(f @ W.T + b, y), [W, b])
    return f, W.detach(), b.detach(), y, gW.float(), gb.float()


@pytest.mark.parametrize("labels", [[4, 4, 4, 4], [1, 1, 3, 5], [0, 1, 2, 3, 4, 5, 6, 7, 8]])
def test_ce_inversion_recovers_features_to_float32_precision(labels):
    f, W, b, y, gW, gb = _head_batch(labels)
    inv = CEInversion(gW, gb, W, b, y)
    best = None
    for seed in range(3):
        z, mu, exact = torch.randn(len(labels), 10, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), 1e-3, False
        for _ in range(150):
            z, mu, before, after = inv.lm_step(z, mu, with_loss=not exact)
            if not exact and before - after <= 1e-12 * before:
                exact, mu = True, 1e-3
        rw, rb = inv.residuals(z)
        d = float(rw.norm() / inv.target.norm() + rb.norm() / inv.gb.norm())
        if best is None or d < best[0]:
            best = (d, z)
    rec, diag = inv.features(best[1])
    m = feature_recovery(rec, f, y.tolist(), y.tolist())
    assert m["relative_error"]["max"] < 1e-5, (m["relative_error"], diag)
    assert diag["rank"] == len(labels)
    # the truth's own residual is at float32 level, and Proposition 2's estimate is close to the true loss
    assert abs(inv.l_hat - float(F.cross_entropy(f @ W.T + b, y))) < 0.05


def test_analytic_jacobian_matches_autograd():
    f, W, b, y, gW, gb = _head_batch([1, 1, 3, 5])
    for dg in (True, False):
        inv = CEInversion(gW, gb, W, b, y, differentiate_g=dg)
        z = torch.randn(4, 10, dtype=torch.float64)
        auto = torch.func.jacrev(lambda v, inv=inv: inv.residual_vector(v, True))(z).reshape(-1, 40)
        assert torch.allclose(inv.jacobian(z, True), auto, atol=1e-10)  # constant G' is a detach in both


def test_rgla_features_exact_on_lenet_with_repeated_labels(cli, tmp_path):
    """The shipped LeNet batch (labels 3, 8, 8, 0): no inverter, so the attack stops after features, says so,
    and the recovered features match the truth's to the precision of the float32 update."""
    ckpt, upd, truth = sample("lenet_b4")
    out = tmp_path / "out"
    res = cli("reconstruct", "rgla", ckpt, upd, "-o", out, "--truth", truth, *FAST)
    summary = json.loads(res.stdout)
    assert summary["feature_relative_error"]["max"] < 1e-4
    report = json.loads((out / "report.json").read_text())
    rec = report["attack"]["recovered"]
    assert rec["stage"] == "features" and rec["images_from"] == "none" and "train-inverter" in rec["images_note"]
    assert rec["conditioning"]["rank"] == 4 and len(rec["logits"]) == 4
    assert sorted(report["labels"]["labels"]) == [0, 3, 8, 8]
    assert report["metrics"]["risk_band"] is None and report["images"] == []
    tensors, _ = read_safetensors(out / "reconstruction.safetensors", "x")
    assert tensors["features"].shape == (4, 768) and tensors["images"].shape[0] == 0
    assert "Feature recovery" in (out / "report.html").read_text()


def test_rgla_recovers_mlp_inputs_analytically(cli, tmp_path):
    x, y = mnist_digits()
    spec = ModelSpec("mlp", 10, (1, 28, 28), MNIST_MEAN, MNIST_STD, {"hidden": [64, 32]})
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "ckpt.safetensors", build_model(spec), spec)
    idx = torch.tensor([10, 11, 12])
    write_safetensors(tmp_path / "imgs.safetensors", {"images": x[idx].contiguous(), "labels": torch.tensor([2, 2, 7])}, {})
    cli("capture", tmp_path / "ckpt.safetensors", tmp_path / "imgs.safetensors", "-o", tmp_path / "upd.safetensors",
        "-b", "3", "--truth-out", tmp_path / "truth.safetensors", "-q")
    res = cli("reconstruct", "rgla", tmp_path / "ckpt.safetensors", tmp_path / "upd.safetensors", "-o", tmp_path / "out",
              "--truth", tmp_path / "truth.safetensors", "--labels-file", _labels(tmp_path, [2, 2, 7]), *FAST)
    summary = json.loads(res.stdout)
    assert summary["summary"]["psnr"]["min"] > 60, summary["summary"]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["attack"]["recovered"]["images_from"] == "analytic"
    assert report["attack"]["recovered"]["analytic_chain"]["layers"] == ["features.1", "features.3", "fc"]


def _labels(tmp_path, labels):
    p = tmp_path / "labels.json"
    p.write_text(json.dumps({"labels": labels}))
    return p


@pytest.mark.slow
def test_inverter_trained_on_cpu_decodes_better_than_noise(cli, tmp_path):
    x, y = mnist_digits(pad_to=32)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    public, private = perm[:1000], perm[4000:4004]
    write_safetensors(tmp_path / "public.safetensors", {"images": x[public].contiguous()}, {})
    write_safetensors(tmp_path / "private.safetensors", {"images": x[private].contiguous(), "labels": y[private].contiguous()}, {})
    ckpt = tmp_path / "ckpt.safetensors"
    cli("init-checkpoint", "lenet", "-o", ckpt, "--input-shape", "1,32,32", "--mean", "0.1307", "--std", "0.3081", "-q")
    res = cli("train-inverter", ckpt, tmp_path / "public.safetensors", "-o", tmp_path / "inv.safetensors",
              "--epochs", "6", "--width", "8", "-q")
    info = json.loads(res.stdout)
    assert info["epochs_run"] == 6 and info["validation_psnr"] > 15
    cli("capture", ckpt, tmp_path / "private.safetensors", "-o", tmp_path / "upd.safetensors", "-b", "4",
        "--bn-mode", "eval", "--truth-out", tmp_path / "truth.safetensors", "-q")
    res = cli("reconstruct", "rgla", ckpt, tmp_path / "upd.safetensors", "-o", tmp_path / "out", "--truth",
              tmp_path / "truth.safetensors", "--inverter", tmp_path / "inv.safetensors", *FAST)
    got = json.loads(res.stdout)["summary"]["psnr"]["mean"]
    truth = load_truth(tmp_path / "truth.safetensors").images
    noise = float(psnr(torch.rand(truth.shape, generator=torch.Generator().manual_seed(0)), truth).mean())
    mean_image = float(psnr(x[public].mean(0, keepdim=True).expand_as(truth), truth).mean())
    assert got > max(noise, mean_image) + 5, (got, noise, mean_image)
    # an inverter belongs to one backbone
    other = tmp_path / "other.safetensors"
    cli("init-checkpoint", "lenet", "-o", other, "--input-shape", "1,32,32", "--seed", "1", "-q")
    cli("capture", other, tmp_path / "private.safetensors", "-o", tmp_path / "upd2.safetensors", "-b", "4", "-q")
    res = cli("reconstruct", "rgla", other, tmp_path / "upd2.safetensors", "-o", tmp_path / "out2",
              "--inverter", tmp_path / "inv.safetensors", *FAST, expect=2)
    assert_one_error_line(res.stderr, "another checkpoint")


def test_rgla_guards(cli, tmp_path, lenet_ckpt, cifar):
    x, y, _ = cifar
    write_safetensors(tmp_path / "ten.safetensors", {"images": x[:10].contiguous(), "labels": y[:10].contiguous()}, {})
    cli("capture", lenet_ckpt, tmp_path / "ten.safetensors", "-o", tmp_path / "upd.safetensors", "-b", "10", "-q")
    res = cli("reconstruct", "rgla", lenet_ckpt, tmp_path / "upd.safetensors", "-o", tmp_path / "out", *FAST, expect=2)
    assert_one_error_line(res.stderr, "not applicable", "B <= classes - 1")
    res = cli("train-inverter", lenet_ckpt, tmp_path / "ten.safetensors", "-o", tmp_path / "inv.safetensors",
              "--epochs", "0", expect=2)
    assert_one_error_line(res.stderr, "--epochs")
    res = cli("reconstruct", "rgla", *sample("lenet_b4")[:2], "-o", tmp_path / "o3", "--inverter",
              sample("lenet_b4")[2], *FAST, expect=2)
    assert_one_error_line(res.stderr, "not an inverter")


def test_train_inverter_ctrl_c_saves_what_it_has(cli, tmp_path, monkeypatch, lenet_ckpt, cifar):
    import fedaudit.models.train_inverter as ti

    x, _, _ = cifar
    write_safetensors(tmp_path / "imgs.safetensors", {"images": x.contiguous()}, {})
    calls = {"n": 0}
    real = ti.F.mse_loss

    def interrupting(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:  # one Ctrl-C, mid-training
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(ti.F, "mse_loss", interrupting)
    res = cli("train-inverter", lenet_ckpt, tmp_path / "imgs.safetensors", "-o", tmp_path / "inv.safetensors",
              "--epochs", "50", "--batch-size", "4", "--width", "4", "-q", expect=130)
    info = json.loads(res.stdout)
    assert info["interrupted"] and info["epochs_run"] < 50
    from fedaudit.io.inverter import load_inverter

    inverter, meta = load_inverter(tmp_path / "inv.safetensors")
    assert json.loads(meta["fedaudit.training"])["interrupted"]
