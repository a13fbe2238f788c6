"""The shipped sample updates regenerate byte for byte from real images (sample_updates/make_samples.py)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from .helpers import ROOT, SAMPLE_NAMES, SAMPLES, assert_regenerated

# Two steps through the ConvNet's max-pools: on a Sapphire Rapids CPU a flipped argmax moved an entry of the update
# by 7.8e-4 of its largest (the other samples stay within 1e-6 there).
LOOSER = {"convnet_fedavg_bn": 1e-2}


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
    if (old / "client_arrays.npz").exists():  # a Flower client's arrays (fixed member dates): the same bytes, or ulps
        if (new / "client_arrays.npz").read_bytes() != (old / "client_arrays.npz").read_bytes():
            with np.load(new / "client_arrays.npz") as a, np.load(old / "client_arrays.npz") as b:
                assert a.files == b.files
                assert all(a[k].dtype == b[k].dtype and np.allclose(a[k], b[k], rtol=0, atol=1e-6) for k in a.files)
    assert (new / "checkpoint.safetensors").read_bytes() == (old / "checkpoint.safetensors").read_bytes()
    assert_regenerated(new, old, LOOSER.get(name, 1e-5))
