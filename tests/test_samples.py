"""The shipped sample updates regenerate byte for byte from real images (sample_updates/make_samples.py)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

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
    for f in ("checkpoint.safetensors", "update.safetensors", "truth.safetensors"):
        assert (tmp_path / name / f).read_bytes() == (SAMPLES / name / f).read_bytes(), f
