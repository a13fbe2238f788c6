"""Defenses change the update exactly as specified, chain in order in the metadata, Refiner runs end to end with a
CPU-trained critic, and ``audit`` writes the defense x attack matrix."""

from __future__ import annotations

import json
import math

import pytest
import torch

from fedaudit.data.offline import natural_patches
from fedaudit.io.files import write_safetensors
from fedaudit.io.update import load_update
from fedaudit.threat_model import load_threat_model

from .helpers import assert_one_error_line, sample

CKPT, UPD, TRUTH = sample("lenet_b4")


def _defend(cli, tmp_path, *args, name="out.safetensors", upd=UPD):
    out = tmp_path / name
    res = cli("defend", *args[:1], CKPT, upd, "-o", out, "-q", *args[1:])
    return json.loads(res.stdout), load_threat_model(CKPT, out), load_threat_model(CKPT, UPD)


def _flat(tm):
    return torch.cat([tm.gradient[k].reshape(-1) for k in tm.present]).double()


def test_prune_zeroes_the_stated_fraction_of_smallest_entries(cli, tmp_path):
    res, d, o = _defend(cli, tmp_path, "prune", "--ratio", "0.3")
    for k in o.present:
        g, h = o.gradient[k].reshape(-1), d.gradient[k].reshape(-1)
        removed = h == 0
        assert int(removed.sum()) == round(0.3 * g.numel()) or (g == 0).any()
        assert torch.equal(h[~removed], g[~removed])
        if removed.any() and (~removed).any():
            assert g[removed].abs().max() <= g[~removed].abs().min()
    assert abs(res["defense"]["info"]["zeroed_fraction"] - 0.3) < 1e-3
    assert load_update(tmp_path / "out.safetensors").meta.defenses[0]["name"] == "prune"


def test_topk_keeps_the_global_top_fraction(cli, tmp_path):
    _, d, o = _defend(cli, tmp_path, "topk-sparsify", "--keep", "0.1")
    g, h = _flat(o), _flat(d)
    kept = h != 0
    assert int(kept.sum()) == round(0.1 * g.numel())
    assert g[~kept].abs().max() <= g[kept].abs().min()


def test_dp_noise_has_the_stated_std_and_clips(cli, tmp_path):
    _, d, o = _defend(cli, tmp_path, "dp", "--sigma", "0.02", "--clip", "0")
    noise = _flat(d) - _flat(o)
    assert abs(float(noise.std()) / 0.02 - 1) < 0.03 and abs(float(noise.mean())) < 0.002
    res, d, o = _defend(cli, tmp_path, "dp", "--sigma", "1e-9", "--clip", "0.5", name="c.safetensors")
    assert abs(float(_flat(d).norm()) - 0.5) < 1e-4 and res["defense"]["info"]["clipped"]
    res, *_ = _defend(cli, tmp_path, "dp", "--eps", "100", "--formula", "fedleak", name="f.safetensors")
    assert math.isclose(res["defense"]["info"]["noise_multiplier"], math.sqrt(2 * math.log(1e5)) / 100)  # 4.80e-2
    res, d, o = _defend(cli, tmp_path, "dp", "--eps", "50", "--noise", "laplace", "--clip", "0", name="l.safetensors")
    noise = _flat(d) - _flat(o)
    assert abs(float(noise.std()) / (math.sqrt(2) / 50) - 1) < 0.05
    assert float((noise.abs() > 3 * noise.std()).double().mean()) > 0.005  # heavier tails than a Gaussian (0.0027)


@pytest.mark.parametrize("bits", [1, 3, 8, 32])
def test_quantize_levels(cli, tmp_path, bits):
    _, d, o = _defend(cli, tmp_path, "quantize", "--bits", str(bits))
    for k in o.present:
        values = d.gradient[k].unique()
        if bits == 32:
            assert torch.equal(d.gradient[k], o.gradient[k])
        elif bits == 1:
            assert len(values.abs().unique()) <= 1
        else:
            assert len(values) <= 2 ** bits - 1
            step = o.gradient[k].abs().max() / (2 ** (bits - 1) - 1)
            assert float((d.gradient[k] - o.gradient[k]).abs().max()) <= float(step) / 2 + 1e-7


def test_soteria_prunes_output_layer_columns_and_needs_the_batch(cli, tmp_path):
    res, d, o = _defend(cli, tmp_path, "soteria", "--ratio", "0.25", "--batch", TRUTH)
    w = d.gradient["fc.weight"]
    zero_cols = (w == 0).all(0)
    assert int(zero_cols.sum()) == round(0.25 * w.shape[1]) == res["defense"]["info"]["pruned_features"]
    assert torch.equal(w[:, ~zero_cols], o.gradient["fc.weight"][:, ~zero_cols])
    for k in o.present:
        if k != "fc.weight":
            assert torch.equal(d.gradient[k], o.gradient[k])
    res = cli("defend", "soteria", CKPT, UPD, "-o", tmp_path / "x.safetensors", expect=2)
    assert_one_error_line(res.stderr, "not applicable", "--batch")


@pytest.fixture(scope="module")
def critic(tmp_path_factory):
    from typer.testing import CliRunner

    from fedaudit.cli.app import app

    folder = tmp_path_factory.mktemp("critic")
    write_safetensors(folder / "patches.safetensors", {"images": natural_patches(400, seed=5)}, {})
    res = CliRunner().invoke(app, ["train-refiner-critic", str(folder / "patches.safetensors"), "-o",
                                   str(folder / "critic.safetensors"), "--width", "8", "--epochs", "3", "--lr", "2e-3",
                                   "--batch-size", "32", "-q"])
    assert res.exit_code == 0, res.output
    return folder / "critic.safetensors", json.loads(res.stdout)


def test_critic_separates_images_from_noise(critic):
    _, info = critic
    cal = info["calibration"]
    assert cal["1.0"] - cal["0.0"] > 0.3 and cal["0.8"] > cal["0.2"]


def test_refiner_end_to_end_within_eps_and_chained(cli, tmp_path, critic):
    path, _ = critic
    res, d, o = _defend(cli, tmp_path, "refiner", "--batch", TRUTH, "--critic", path, "--eps", "0.05")
    info = res["defense"]["info"]
    assert float((_flat(d) - _flat(o)).norm()) <= 0.05 + 1e-4
    assert info["projected"] and info["refined_distance_before_projection"] > 0.05 and len(info["history"]) == 10
    # chain: prune on top of refiner; both recorded in order; the defended update still attacks
    cli("defend", "prune", CKPT, tmp_path / "out.safetensors", "-o", tmp_path / "two.safetensors", "-q")
    assert [r["name"] for r in load_update(tmp_path / "two.safetensors").meta.defenses] == ["refiner", "prune"]
    out = tmp_path / "rec"
    cli("reconstruct", "ig", CKPT, tmp_path / "two.safetensors", "-o", out, "-n", "5", "-q")
    assert json.loads((out / "report.json").read_text())["status"] == "complete"
    res = cli("defend", "refiner", CKPT, UPD, "-o", tmp_path / "y.safetensors", "--batch", TRUTH, expect=2)
    assert_one_error_line(res.stderr, "--critic")


@pytest.mark.slow
def test_audit_writes_the_matrix(cli, tmp_path):
    out = tmp_path / "audit"
    res = cli("audit", CKPT, UPD, "--truth", TRUTH, "-o", out, "--attacks", "ig,rgla",
              "--defenses", "none,prune:0.5,dp:sigma=0.01:clip=0,quantize:4+soteria:0.5", "-n", "60", "--restarts", "2",
              "--eval-images", TRUTH, "-q", "--fail-on", "medium", "--attack-options", "ig:tv=0.1:lr=0.05", expect=None)
    summary = json.loads(res.stdout)
    assert summary["status"] == "complete" and len(summary["cells"]) == 8
    worst = summary["worst_risk_band"]
    assert res.exit_code == (1 if worst in ("medium", "high", "very_high") else 0)
    doc = json.loads((out / "audit.json").read_text())
    assert [r["defense"] for r in doc["rows"]] == ["none", "prune:0.5", "dp:sigma=0.01:clip=0", "quantize:4+soteria:0.5"]
    assert doc["rows"][0]["utility"]["relative_gradient_error"] == 0
    assert all(r["utility"]["relative_gradient_error"] > 0 for r in doc["rows"][1:])
    assert [rec["name"] for rec in doc["rows"][3]["records"]] == ["quantize", "soteria"]
    u = doc["rows"][1]["utility"]
    assert {"accuracy_before", "accuracy_true_step", "accuracy_defended_step"} <= set(u)
    ig = [c for c in doc["cells"] if c["attack"] == "ig"]
    assert all(c["psnr"] > 5 and c["risk_band"] and c["label_insacc"] is not None for c in ig)
    assert all(0 < c["label_insacc_floor"] < 1 for c in ig)  # the even guess's InsAcc beside it
    assert all((out / c["grid"]).exists() and (out / c["report"]).exists() for c in ig)
    cell = json.loads((out / ig[0]["report"]).read_text())
    assert cell["options"]["lr"] == 0.05 and cell["options"]["attack_options"]["tv"] == 0.1
    rgla = [c for c in doc["cells"] if c["attack"] == "rgla"]
    assert rgla[0]["feature_relative_error"] < 1e-2  # undefended: (near) exact features after 60 LM steps
    html = (out / "audit.html").read_text()
    assert html.count("<img") >= 4 and "prune:0.5" in html
    res = cli("audit", CKPT, UPD, "--truth", TRUTH, "-o", tmp_path / "a2", "--defenses", "none,prnue:0.5", expect=2)
    assert_one_error_line(res.stderr, "prune")
    res = cli("audit", CKPT, UPD, "--truth", TRUTH, "-o", tmp_path / "a3", "--defenses", "prune:rate=0.5", expect=2)
    assert_one_error_line(res.stderr, "no option 'rate'")
    res = cli("audit", CKPT, UPD, "--truth", TRUTH, "-o", tmp_path / "a4", "--attack-options", "ig:lr=fast", expect=2)
    assert_one_error_line(res.stderr, "lr='fast'")


@pytest.mark.parametrize("args,fragment", [
    (("--defenses", "none,prune:1.5"), "prune: ratio must be in [0, 1], got 1.5"),
    (("--defenses", "dp:eps=-1"), "eps must be >= 0"),
    (("--defenses", "dp"), "dp: give a noise level"),
    (("--attacks", "hfgi"), "needs auxiliary images (--aux) or Gaussian dummies (--dummy)"),
])
def test_audit_refuses_a_plan_that_cannot_run_before_any_work(cli, tmp_path, args, fragment):
    """A bad defense row or an attack that cannot start: exit 2 with one line, and no output folder."""
    out = tmp_path / "audit"
    res = cli("audit", CKPT, UPD, "--truth", TRUTH, "-o", out, "-n", "3", "-q", "--fail-on", "medium", *args, expect=2)
    assert_one_error_line(res.stderr, fragment)
    assert not out.exists()


def test_audit_with_a_cell_that_fails_at_run_time_is_incomplete(cli, tmp_path, monkeypatch):
    """A cell that fails on a defended copy: the finished cells are written, status 'incomplete', exit 3 even with
    --fail-on never, and one stderr line names what did not run; --fail-on never passes over it."""
    from fedaudit.errors import FedauditError
    from fedaudit.jobs import reconstruct

    real = reconstruct.ReconstructJob.run

    def flaky(self, truth=None, inputs=None):
        if self.tm.meta.defenses:  # only the defended copy
            raise FedauditError("simulated failure on the defended copy")
        return real(self, truth, inputs)

    monkeypatch.setattr(reconstruct.ReconstructJob, "run", flaky)
    out = tmp_path / "audit"
    res = cli("audit", CKPT, UPD, "--truth", TRUTH, "-o", out, "--attacks", "ig", "--defenses", "none,prune:0.5",
              "-n", "3", "-q", "--fail-on", "never", expect=3)
    assert_one_error_line(res.stderr, "audit incomplete: 1 planned", "prune:0.5 x ig: simulated failure")
    doc = json.loads((out / "audit.json").read_text())
    assert doc["status"] == "incomplete" and doc["failed"] == ["prune:0.5 x ig: simulated failure on the defended copy"]
    assert [c.get("error") is None for c in doc["cells"]] == [True, False]
    assert json.loads(res.stdout)["status"] == "incomplete"
