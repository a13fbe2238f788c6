"""``fedaudit score``: reconstructions from any tool against the truth file; --fail-on exit codes."""

from __future__ import annotations

import json

import torch

from fedaudit.io.files import write_safetensors
from fedaudit.io.truth import load_truth

from .helpers import assert_one_error_line, sample


def _recon(tmp_path, noise: float, n=None):
    truth = load_truth(sample("lenet_b4")[2]).images
    g = torch.Generator().manual_seed(0)
    x = truth.flip(0) if noise < 1 else torch.rand(truth.shape, generator=g)
    x = (x + noise * torch.randn(x.shape, generator=g)).clamp(0, 1) if noise < 1 else x
    path = tmp_path / f"recon_{noise}.safetensors"
    write_safetensors(path, {"images": x[:n]}, {})
    return path


def test_score_good_reconstruction(cli, tmp_path):
    truth = sample("lenet_b4")[2]
    res = cli("score", _recon(tmp_path, 0.01), "-t", truth, "-o", tmp_path / "r", "--fail-on", "high", expect=1)
    out = json.loads(res.stdout)
    assert out["risk_band"] == "very_high" and out["summary"]["psnr"]["mean"] > 35
    assert "at or above --fail-on high" in res.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [r["recon_index"] for r in report["metrics"]["per_image"]] == [3, 2, 1, 0]  # flipped order undone
    assert report["inputs"]["truth"]["sha256"] and (tmp_path / "r" / "report.html").exists()
    best = report["metrics"]["paper_best_match"]  # FedLeak's protocol, reported beside the one-to-one score
    assert out["paper_best_match"] == best
    assert best["distinct_reconstructions"] == 4 and best["psnr"]["mean"] >= out["summary"]["psnr"]["mean"] - 1e-9
    html = (tmp_path / "r" / "report.html").read_text()
    assert "For comparison with FedLeak" in html
    assert out["blank_baseline"] == report["metrics"]["blank_baseline"] and out["psnr_above_blank"] > 20
    assert "Floor: the strongest reconstruction that shows nothing" in html and "reconstructions are above it" in html


def test_score_noise_is_low_risk(cli, tmp_path):
    res = cli("score", _recon(tmp_path, 1.0), "-t", sample("lenet_b4")[2], "-o", tmp_path / "r", "--fail-on", "high")
    out = json.loads(res.stdout)
    assert out["risk_band"] in ("low", "medium")
    assert out["psnr_above_blank"] < 0  # uniform noise scores below a blank gray image
    assert "reconstructions are not above it" in (tmp_path / "r" / "report.html").read_text()


def test_score_input_errors(cli, tmp_path):
    truth = sample("lenet_b4")[2]
    res = cli("score", _recon(tmp_path, 0.01, n=2), "-t", truth, "-o", tmp_path / "r", expect=2)
    assert_one_error_line(res.stderr, "2 reconstructions for 4 truth images")
    assert not (tmp_path / "r").exists()
    (tmp_path / "taken").mkdir()
    res = cli("score", _recon(tmp_path, 0.01), "-t", truth, "-o", tmp_path / "taken", expect=2)
    assert_one_error_line(res.stderr, "already exists", "--force")
    res = cli("score", _recon(tmp_path, 0.01), "-t", sample("lenet_b4")[1], "-o", tmp_path / "r2", expect=2)
    assert_one_error_line(res.stderr, "no 'images' tensor")
