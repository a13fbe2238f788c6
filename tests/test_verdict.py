"""The truth-free verdict: evidence in every run, the estimated band, and --fail-on without --truth."""

from __future__ import annotations

import json

import torch

from benchmarks.common import threat_model
from fedaudit.client.capture import CaptureConfig
from fedaudit.jobs import LabelJob, ReconstructJob, Session
from fedaudit.models import ModelSpec, build_model
from fedaudit.verdict.channels import analytic_input
from fedaudit.verdict.estimate import estimate
from fedaudit.verdict.reconstruction import PSNR_CAP, restart_agreement

from .helpers import load_sample, sample


def test_identical_restarts_agree_maximally_and_different_ones_do_not():
    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    same = restart_agreement(x, [x[[2, 0, 3, 1]].clone(), x.clone()])  # order does not matter: matched one to one
    assert same["psnr"] == PSNR_CAP and same["psnr_min"] == PSNR_CAP and same["restarts_compared"] == 3
    other = restart_agreement(x, [torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))])
    assert other["psnr"] < 15
    assert restart_agreement(x, []) is None


def test_a_converging_b1_lenet_is_estimated_high_and_fail_on_uses_it_without_truth(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b1")
    out = tmp_path / "out"
    res = cli("reconstruct", "ig", ckpt, upd, "-o", out, "-n", "200", "--restarts", "2", "--fail-on", "high", expect=1)
    summary = json.loads(res.stdout)
    assert summary["risk_band_estimated"] in ("high", "very_high"), summary
    assert summary["band_source"] == "estimated" and summary["gate"] == "upper"
    assert summary["band_for_fail_on"] == summary["risk_band_estimated_range"][1]
    assert summary["estimate_source"].startswith("uncalibrated rule")  # the test runner's FEDAUDIT_PROXIES=0
    assert "(estimated, upper end) is at or above --fail-on high" in res.stderr
    report = json.loads((out / "report.json").read_text())
    ev = report["evidence"]
    assert ev["reconstruction"]["explained"]["relative_distance"] < 0.5
    assert ev["reconstruction"]["restart_agreement"]["restarts_compared"] == 2
    assert ev["labels"]["determined"] in ("yes", "partly") and ev["labels"]["methods_compared"] >= 2
    assert "Estimated leakage risk" in (out / "report.html").read_text()
    # with the truth the measured band decides, and both are in the report
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "t", "-n", "200", "--truth", sample("lenet_b1")[2],
              "--fail-on", "never", "-q")
    summary = json.loads(res.stdout)
    assert summary["band_source"] == "measured" and summary["risk_band_estimated"] is not None


def test_a_dp_noised_update_is_estimated_low():
    from fedaudit.jobs.defend import DefendJob, parse_defense

    session = Session(seed=0, quiet=True)
    tm, truth = load_sample("lenet_b1", session)
    job = DefendJob(session, tm, [parse_defense("dp:clip=1:sigma=10")], truth)
    noisy = job.defended_threat_model(job.run())
    result = ReconstructJob(session, noisy, "ig", None, {"iterations": 100}).run()
    verdict = result.report.to_json()["evidence"]["verdict"]
    assert verdict["band"] == "low", verdict
    # the same run without the noise explains the update far better
    clean = ReconstructJob(session, tm, "ig", None, {"iterations": 100}).run().report.to_json()["evidence"]
    noisy_rel = result.report.to_json()["evidence"]["reconstruction"]["explained"]["relative_distance"]
    assert clean["reconstruction"]["explained"]["relative_distance"] < noisy_rel / 2, (clean, noisy_rel)


def test_the_analytic_channel_is_exact_for_one_sample_through_a_linear_first_layer():
    spec = ModelSpec("mlp", 10, (1, 8, 8), (0.5,), (0.5,), {"hidden": [32]})
    torch.manual_seed(0)
    net = build_model(spec).eval()
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([1, 2, 3, 4])
    one = analytic_input(threat_model(spec, net, x[:1], y[:1], CaptureConfig(batch_size=1, bn_mode="eval")))
    four = analytic_input(threat_model(spec, net, x, y, CaptureConfig(batch_size=4)))
    assert one["applies"] and one["exact"] and one["dispersion"] < 1e-4
    assert four["applies"] and not four["exact"]
    assert estimate({"channels": {"analytic_input": one}})["band"] == "very_high"
    lenet = load_sample("lenet_b1")[0]
    assert not analytic_input(lenet)["applies"]


def test_labels_report_their_evidence_and_no_images_give_no_band():
    tm, _ = load_sample("lenet_b4")
    out = LabelJob(Session(), tm, "llg").run()
    ev = out["evidence"]
    assert 0 <= ev["agreement"] <= 1 and set(ev["agreement_by_method"]) >= {"bias-count", "zlg", "ilrg"}
    assert ev["determined"] in ("yes", "partly", "no")
    assert estimate({"channels": {}})["band"] is None


def test_label_evidence_says_when_the_counts_are_an_even_split(digits):
    """Truth-free: counts an even guess overlaps by at least 0.9 get a warning that they add little to a guess that
    reads no update (here bias-count's exact reading of a balanced batch: exact, and still no more than an even guess
    gives); a one-class batch's counts do not (the even guess overlaps them by 0.1)."""
    from fedaudit.data.offline import MNIST_MEAN, MNIST_STD
    from fedaudit.jobs.labels import EVEN_SPLIT_WARN

    from .mnist_lenet import server_view

    spec = ModelSpec("lenet", 10, (1, 32, 32), MNIST_MEAN, MNIST_STD, {"init": "torch"})  # bias-count exact there
    x, y, aux = digits
    two_each = torch.cat([torch.nonzero(y[:2000] == c).flatten()[:2] for c in range(10)])
    one_class = torch.nonzero(y[:2000] == 3).flatten()[:20]
    outs = []
    for idx in (two_each, one_class):
        tm = server_view(x[idx], y[idx], CaptureConfig(batch_size=20, bn_mode="eval"), spec=spec)
        outs.append(LabelJob(Session(aux=aux), tm, "bias-count").run())
    even, single = outs
    assert even["counts_int"] == [2] * 10
    assert even["evidence"]["even_split_overlap"] == 1.0 >= EVEN_SPLIT_WARN
    assert any("close to an even split" in w for w in even["warnings"])
    assert single["evidence"]["even_split_overlap"] < 0.5
    assert not any("even split" in w for w in single["warnings"])
