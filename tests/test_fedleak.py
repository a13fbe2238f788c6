"""FedLeak internals: the top-R% mask (exact and sampled), the fused L1 + cosine and its closed-form gradient,
the per-tensor reduction and the signed step, the loop's monitor hook, the sigmoid ResNet option, and the
paper-scale benchmark script (tiny settings)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from fedaudit.attacks.fedleak import _kth_largest, _sample_step, masked_l1_cosine, top_mask
from fedaudit.errors import InputError
from fedaudit.models import ModelSpec, build_model

from .helpers import ROOT, attack_job


def _fedleak(name="lenet_b4", **options):
    """FedLeak with the true labels: these tests are about the objective."""
    return attack_job(name, "fedleak", options)[1]


def test_top_mask_exact_keeps_the_top_ratio_of_each_tensor():
    g = [torch.randn(1000, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    mask = top_mask(g, 0.3, "per-tensor", sample=0)
    for part, t in zip(mask, g):
        assert int(part.sum()) == 300
        assert t.abs()[part.bool()].min() >= t.abs()[~part.bool()].max()
    glob = torch.cat(top_mask([g[0], 10 * g[1]], 0.5, "global", sample=0))
    both = torch.cat([g[0], 10 * g[1]]).abs()
    assert int(glob.sum()) == 1000 and both[glob.bool()].min() >= both[~glob.bool()].max()
    assert glob[1000:].sum() > 800  # the large tensor dominates a global top-50%


def test_kth_largest_is_torch_kthvalue_on_strided_and_tied_inputs():
    gen = torch.Generator().manual_seed(3)
    for v in (torch.randn(10_001, generator=gen), torch.randn(9_000, generator=gen, dtype=torch.float64)[::7],
              torch.randint(0, 5, (4_000,), generator=gen).float(), torch.tensor([2.0])):
        for k in {1, max(1, v.numel() // 2), v.numel()}:
            assert _kth_largest(v, k).item() == torch.kthvalue(v, v.numel() - k + 1).values.item()


def test_top_mask_sampled_threshold_is_close_and_deterministic():
    g = [torch.randn(64, 32, 3, 3, generator=torch.Generator().manual_seed(1)) * torch.linspace(0.1, 3, 64).view(-1, 1, 1, 1),
         torch.randn(300_000, generator=torch.Generator().manual_seed(2))]
    mask = top_mask(g, 0.5, "per-tensor", sample=4096)
    for part, t in zip(mask, g):
        assert part.shape == t.shape
        frac = float(part.mean())
        assert abs(frac - 0.5) < 2.5 * (0.25 / 4096) ** 0.5 + 1e-3, frac  # 2.5 sigma of a 4,096-sample quantile
    assert all(torch.equal(a, b) for a, b in zip(mask, top_mask(g, 0.5, "per-tensor", sample=4096)))
    glob = top_mask(g, 0.5, "global", sample=4096)  # one threshold from every tensor's sample
    assert abs(float(torch.cat([m.reshape(-1) for m in glob]).mean()) - 0.5) < 0.02
    for n, s in [(18432, 4096), (300_000, 4096), (10, 4096), (1 << 20, 65536)]:
        step = _sample_step(n, s)
        assert step == 1 or (step % 2 and step % 3)


def test_fused_l1_cosine_on_lists_matches_the_one_vector_autograd_reference():
    gen = torch.Generator().manual_seed(0)
    shapes = [(5, 3, 3, 3), (5,), (10, 45), (10,)]
    g = [torch.randn(s, dtype=torch.float64, generator=gen, requires_grad=True) for s in shapes]
    u = [torch.randn(s, dtype=torch.float64, generator=gen) for s in shapes]
    m = [(torch.rand(s, generator=gen) > 0.5).double() for s in shapes]
    um = [a * b for a, b in zip(u, m)]
    nb, count = torch.cat([t.reshape(-1) for t in um]).norm(), sum(t.sum() for t in m)
    got = masked_l1_cosine(g, m, um, nb, count)
    gf, mf, uf = (torch.cat([t.reshape(-1) for t in ts]) for ts in (g, m, um))
    ref = (gf * mf - uf).abs().sum() / mf.sum() + 1 - torch.dot(gf * mf, uf) / ((gf * mf).norm() * uf.norm())
    assert abs(float((got - ref).detach())) < 1e-12
    a = torch.autograd.grad(3 * got, g)
    b = torch.autograd.grad(3 * ref, g)
    assert all(torch.allclose(x, y, atol=1e-12) for x, y in zip(a, b))
    assert torch.autograd.gradcheck(lambda *v: masked_l1_cosine(list(v), m, um, nb, count), tuple(g))


def test_per_tensor_reduction_and_signed_step():
    a = _fedleak(reduction="per-tensor", **{"mask-sample": 0, "tv": 0.0, "act": 0.0})
    x = a.init_state(torch.Generator().manual_seed(0))["x"]
    d, _ = a._objective(x)
    ref = 0.0
    for gt, ut in zip(a.engine.gradient(x, a.labels), a.engine.target.tensors):
        m = top_mask([gt], 0.5, "global", 0)[0].reshape(-1)
        gm, um = gt.reshape(-1) * m, ut.reshape(-1) * m
        ref = ref + (gm - um).abs().sum() / m.sum() + 1 - torch.dot(gm, um) / (gm.norm() * um.norm())
    d, ref = float(d.detach()), float(ref.detach())
    assert abs(d - ref) < 1e-4 * abs(ref)
    s = _fedleak(signed=True)
    state = s.init_state(torch.Generator().manual_seed(0))
    s.closure(state, 0)
    assert set(state["x"].grad.unique().tolist()) <= {-1.0, 0.0, 1.0}


def test_loop_monitor_sees_iterations_and_can_stop():
    seen = []

    def monitor(attack, state, restart, it):
        seen.append((restart, it, tuple(attack.images(state).shape)))
        return it >= 6

    job, a, labels = attack_job("lenet_b4", "fedleak", {"blend": 0.0}, {"iterations": 20, "lr": 0.03, "schedule": "none"},
                                monitor=monitor, monitor_every=3)
    r = job.optimize(a, labels)
    assert [s[1] for s in seen] == [3, 6] and r.iterations_run == 6
    assert seen[0][2] == tuple(r.images.shape)


def test_sigmoid_resnet_option():
    spec = ModelSpec("resnet10", 10, (3, 32, 32), (0.5,) * 3, (0.5,) * 3, {"width": 8, "activation": "sigmoid"})
    model = build_model(spec)
    kinds = {type(m).__name__ for m in model.modules()}
    assert "Sigmoid" in kinds and "ReLU" not in kinds
    relu = build_model(ModelSpec("resnet10", 10, (3, 32, 32), (0.5,) * 3, (0.5,) * 3, {"width": 8}))
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in relu.parameters())
    with pytest.raises(InputError, match="activation"):
        build_model(ModelSpec("resnet10", 10, (3, 32, 32), (0.5,) * 3, (0.5,) * 3, {"activation": "tanh"}))


@pytest.mark.slow
def test_fedleak_scale_benchmark_runs_tiny(tmp_path):
    out = tmp_path / "run.json"
    res = subprocess.run([sys.executable, "-m", "benchmarks.fedleak_scale", "--width", "4", "--batch", "2",
                          "--iterations", "4", "--every", "2", "--device", "cpu", "--lr", "0.03", "--schedule", "none", "--opt", "blend=0.5",
                          "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    run = json.loads(out.read_text())
    assert [p["iteration"] for p in run["points"]] == [2, 4] and run["options"]["blend"] == 0.5
    assert 0 < run["final_psnr"] < 60 and run["ms_per_iter"] > 0
    assert run["final_psnr_best_match"] >= run["final_psnr"] - 1e-6  # many-to-one can only score higher
    res = subprocess.run([sys.executable, "-m", "benchmarks.fedleak_scale", "--summarize", str(out),
                          "--results", str(tmp_path / "table"), "--caption", "tiny"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0] == "tiny" and table[4].startswith("| resnet10 w4 relu, random, B=2 | fedleak | 0.03, none | blend=0.5")
    assert json.loads((tmp_path / "table.json").read_text())[0]["final_psnr"] == run["final_psnr"]


@pytest.mark.slow
def test_fedleak_scale_mnist_trained_run_and_blank_floor(tmp_path):
    """--data mnist attacks digits held out from the --state trained split; the table names the data and
    training and reports the blank-image PSNR floor (an all-black image scores about 11 dB on digits)."""
    from benchmarks.common import TRAIN_DIGITS, mnist_split
    from benchmarks.fedleak_scale import images, reference_psnr

    x, y, perm = mnist_split()
    held, _ = images(None, "mnist")
    train = x[perm[:TRAIN_DIGITS]].flatten(1)
    assert held.shape == (20, 3, 32, 32)
    assert not any(bool((train == h.flatten()).all(1).any()) for h in held)  # none of them was trained on
    ref = reference_psnr("mnist", 16)
    assert 9 < ref["black"]["psnr"] < 14 and ref["gray"]["psnr"] < ref["black"]["psnr"] and ref["floor"]["image"] == "black"
    out = tmp_path / "run.json"
    res = subprocess.run([sys.executable, "-m", "benchmarks.fedleak_scale", "--width", "4", "--batch", "2",
                          "--data", "mnist", "--state", "trained", "--train-epochs", "1", "--attack", "ig",
                          "--iterations", "2", "--every", "2", "--device", "cpu", "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    run = json.loads(out.read_text())
    assert run["data"] == "mnist" and run["train_epochs"] == 1 and run["state"] == "trained"
    res = subprocess.run([sys.executable, "-m", "benchmarks.fedleak_scale", "--summarize", str(out),
                          "--results", str(tmp_path / "table"), "--caption", "tiny"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    table = (tmp_path / "table.md").read_text()
    assert "| resnet10 w4 relu, trained, mnist, B=2 | ig |" in table
    assert f"mnist B=2: all-black {reference_psnr('mnist', 2)['black']['psnr']:.2f} dB" in table
