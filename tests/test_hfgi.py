"""HFGI stepwise inversion: the general layer schedule reproduces the official ResNet-34 schedule, the quantised
sign takes the code's three levels, and the attack runs end to end on a sample update."""

from __future__ import annotations

import json

import torch

from fedaudit.attacks.hfgi import matched_count, quantized_sign

from .helpers import sample

DEFAULTS = (0.1, 1 / 11, 0.782, 1 / 30)


def test_schedule_reproduces_the_resnet34_code():
    """docs/methods/attacks.md (HFGI): ResNet-34 has 110 tensors, s = 100 -> 25 in steps of 10 every 500 of 15,000 iterations."""
    def start_index(it):  # the code's 1-based s: tensors s..110 are matched
        return 110 - matched_count(110, it, 15000, *DEFAULTS, floor=2) + 1
    expected = {0: 100, 498: 100, 499: 90, 998: 90, 999: 80, 1499: 70, 1999: 60, 2499: 50, 2999: 40,
                3499: 30, 3998: 30, 3999: 25, 14999: 25}
    assert {it: start_index(it) for it in expected} == expected


def test_schedule_scales_with_the_budget_and_keeps_the_output_layer():
    counts = [matched_count(8, it, 300, *DEFAULTS, floor=2) for it in range(300)]
    assert counts[0] == 2 and counts == sorted(counts) and counts[-1] == round(0.782 * 8)
    assert matched_count(110, 1499, 3000, *DEFAULTS, floor=2) == 86  # 1/30 of 3000 = 100 iterations per widening


def test_quantized_sign_levels():
    g = torch.randn(2, 3, 8, 8)
    q = quantized_sign(g)
    assert set(torch.round(q.abs() * 10).unique().tolist()) <= {2.0, 6.0, 10.0}
    assert torch.equal(q.sign(), g.sign())
    m = g.abs().median()
    assert torch.all(q[g.abs() > 0.75 * m + 1e-6].abs() == 1.0)


def test_hfgi_runs_end_to_end(cli, tmp_path):
    ckpt, upd, truth = sample("resnet10_b4")
    out = tmp_path / "out"
    res = cli("reconstruct", "hfgi", ckpt, upd, "-o", out, "--truth", truth, "--dummy", "-n", "60", "-q")
    summary = json.loads(res.stdout)
    assert summary["status"] == "complete" and len(summary["labels"]) == 4
    report = json.loads((out / "report.json").read_text())
    assert report["labels"]["method"] == "hfgi" and report["options"]["schedule"] == "step-0.33"
    details = report["attack"]["details"]
    matched = [s["matched"] for s in details["layer_schedule"]]
    assert matched == sorted(matched) and len(matched) > 3 and matched[-1] < details["tensors_matchable"]
    assert details["layer_schedule"][0]["shallowest"].startswith("layer4")  # deepest block first
    assert details["bn_prior"] == "on"
    assert report["metrics"]["summary"]["psnr"]["mean"] > 5 and (out / "grid.png").exists()
