"""A fixed-seed sample of the fuzz harness (benchmarks/fuzz.py): mutated updates, checkpoints, truth files, label
files, Flower .npz arrays and image folders through the CLI must end with exit 0, 1 or 2, one stderr line, no
traceback and no partial file."""

from __future__ import annotations

import pytest

from benchmarks.fuzz import fuzz


@pytest.mark.slow
def test_300_mutated_files_through_the_readers_keep_the_error_contract():
    rows = fuzz(300, seed=1, fast=True)  # more on demand: python -m benchmarks.fuzz
    broken = [r for r in rows if r["problems"]]
    assert not broken, broken[:3]
    assert sum(r["exit"] == 2 for r in rows) > 180  # most mutations are bad input, and are reported as such
    assert {r["target"] for r in rows} == {"update", "checkpoint", "truth", "labels-file", "npz", "images"}
    assert {r["command"] for r in rows} >= {"inspect", "labels llg", "reconstruct ig", "import flower-npz", "capture"}


def test_40_mutated_files_through_every_command_keep_the_error_contract():
    rows = fuzz(40, seed=2)
    broken = [r for r in rows if r["problems"]]
    assert not broken, broken[:3]
    assert {r["command"].split()[0] for r in rows} >= {"inspect", "labels", "reconstruct", "defend"}
