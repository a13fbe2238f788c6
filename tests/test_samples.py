"""The shipped sample updates regenerate byte for byte from real images (sample_updates/make_samples.py)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from fedaudit.io.files import read_safetensors

from .helpers import ROOT, SAMPLE_NAMES, SAMPLES


def _script():
    if "make_samples" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_samples", ROOT / "sample_updates" / "make_samples.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["make_samples"] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
    return sys.modules["make_samples"]


def test_samples_folder_is_small_and_complete():
    total = sum(p.stat().st_size for p in SAMPLES.rglob("*") if p.is_file())
    assert total < 20 * 2**20
    assert len(SAMPLE_NAMES) >= 6
    for name in SAMPLE_NAMES:
        assert {p.name for p in (SAMPLES / name).iterdir()} >= {"checkpoint.safetensors", "update.safetensors", "truth.safetensors"}


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_regenerates_identically(tmp_path, name):
    import torch

    threads = torch.get_num_threads()
    try:
        _script().main(["--out", str(tmp_path), "--only", name])
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)
    new, old = tmp_path / name, SAMPLES / name
    if (old / "client_arrays.npz").exists():  # a Flower client's arrays: fixed member dates, the same bytes
        assert (new / "client_arrays.npz").read_bytes() == (old / "client_arrays.npz").read_bytes()
    assert (new / "checkpoint.safetensors").read_bytes() == (old / "checkpoint.safetensors").read_bytes()
    if (new / "update.safetensors").read_bytes() == (old / "update.safetensors").read_bytes():
        assert (new / "truth.safetensors").read_bytes() == (old / "truth.safetensors").read_bytes()
        return
    # Not byte for byte: a CPU whose BLAS/convolution kernels sum in another order (seen on a Sapphire Rapids
    # machine, with the AVX2 pin of conftest.py in place) moves float32 gradients by an ulp or two. Everything else
    # must still be identical, and every tensor equal to within a few ulps of the update's scale (a bias before a
    # train-mode BatchNorm has a zero gradient in exact arithmetic: its float32 entries are rounding noise).
    (a, meta_a), (b, meta_b) = (read_safetensors(d / "update.safetensors", "update") for d in (new, old))
    assert meta_a == meta_b and a.keys() == b.keys()
    scale = max(float(v.abs().max()) for v in b.values())
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert float((a[k] - b[k]).abs().max()) <= 1e-5 * scale, k
    (ta, tmeta_a), (tb, tmeta_b) = (read_safetensors(d / "truth.safetensors", "truth") for d in (new, old))
    assert {k: v for k, v in tmeta_a.items() if k != "fedaudit.update_sha256"} == \
        {k: v for k, v in tmeta_b.items() if k != "fedaudit.update_sha256"}
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
