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


def test_a_case_past_its_limit_is_a_failure_row_and_the_run_goes_on(tmp_path):
    """The harness died with an uncaught Hang whenever one case ran over its alarm (CliRunner catches Exception
    only); now the case is a row with its problem, and the next case runs."""
    import time

    from benchmarks import fuzz as harness

    class Slow:  # a command that never returns within the limit
        def invoke(self, *args, **kwargs):
            time.sleep(5)

    row = harness.run_case(Slow(), 1, tmp_path, fast=True, limit=0.2)
    assert row["problems"] == ["hang: no exit within 0.2 s"] and row["exit"] is None
    assert harness.run_case(harness.CliRunner(), 2, tmp_path, fast=True)["seed"] == 2  # the run goes on


def test_the_limit_scales_with_a_measured_baseline():
    from benchmarks import fuzz as harness

    limit, baseline = harness.measured_limit(harness.CliRunner())
    assert baseline > 0 and limit == max(harness.TIME_LIMIT, harness.LOAD_FACTOR * baseline)
