"""safetensors reading errors, canonical (byte-deterministic) writing, atomic writes."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from fedaudit.errors import InputError
from fedaudit.io.files import atomic_write_text, read_safetensors, write_safetensors


def test_roundtrip_and_canonical_bytes(tmp_path):
    tensors = {"b": torch.arange(6.0).reshape(2, 3), "a": torch.ones(4, dtype=torch.int64)}
    meta = {f"fedaudit.k{i}": str(i) for i in range(20)}
    p1 = write_safetensors(tmp_path / "1.safetensors", tensors, meta)
    p2 = write_safetensors(tmp_path / "2.safetensors", dict(reversed(list(tensors.items()))), dict(reversed(list(meta.items()))))
    assert p1.read_bytes() == p2.read_bytes()
    back, md = read_safetensors(p1, "x")
    assert torch.equal(back["b"], tensors["b"]) and torch.equal(back["a"], tensors["a"])
    assert md["fedaudit.k7"] == "7" and md["format"] == "pt"


@pytest.mark.parametrize("cut", [0, 5, 20, -10])
def test_truncated_or_junk_files_are_input_errors(tmp_path, cut):
    good = tmp_path / "good.safetensors"
    save_file({"a": torch.randn(50, 50)}, good)
    bad = tmp_path / "bad.safetensors"
    data = good.read_bytes()
    bad.write_bytes(data[:cut] if cut >= 0 else data[:cut])
    with pytest.raises(InputError, match="not a valid safetensors file"):
        read_safetensors(bad, "update")


def test_pickles_are_refused(tmp_path):
    p = tmp_path / "model.pt"
    torch.save({"a": torch.ones(1)}, p)
    with pytest.raises(InputError, match="pickle"):
        read_safetensors(p, "checkpoint")


def test_missing_and_directory_inputs(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_safetensors(tmp_path / "nope.safetensors", "update")
    with pytest.raises(InputError, match="directory"):
        read_safetensors(tmp_path, "update")


def test_atomic_write_refuses_unwritable_places(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        atomic_write_text(tmp_path / "no" / "such" / "dir.json", "{}")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot write"):
        atomic_write_text(blocker / "out.json", "{}")
    target = tmp_path / "out.json"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left
