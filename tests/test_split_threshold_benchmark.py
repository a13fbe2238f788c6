"""benchmarks/labels_split_threshold.py's summary: each threshold reads a batch as the split's answer where the
threshold keeps it and as the route below otherwise, paired against the shipped threshold."""

from __future__ import annotations

from benchmarks.labels_split_threshold import ROUTES, summary
from fedaudit.labels.auto_routes.calibration import HIDDEN_MIN_RESOLVED, SPLIT_MAX_FIT


def test_the_summary_reads_each_threshold_from_both_readings():
    rows = [{"chosen": "sample-split", "value": 1e-6, "split": 1.0, "below": 0.5},
            {"chosen": "sample-split", "value": 5e-3, "split": 0.5, "below": 1.0},
            {"chosen": "bias-count", "shipped": 0.75}]  # the split did not run
    assert SPLIT_MAX_FIT == 1e-2
    table = summary(rows).splitlines()
    assert table[0] == "2 of 3 batches went to sample-split (fit 1.0e-06 .. 5.0e-03)"
    assert "| 0.01 | 2 | 75.0% | +0.0 +- 0.0 |" in table  # the shipped threshold keeps both answers
    assert "| 0.001 | 1 | 100.0% | +25.0 +- 25.0 |" in table  # the second batch goes to the route below (1.0)
    assert "| inf | 2 | 75.0% | +0.0 +- 0.0 |" in table
    assert summary([rows[2]]) == "no batch went to sample-split"


def test_hidden_split_keeps_a_share_verified_at_or_above_the_threshold():
    route = ROUTES["hidden-split"]
    assert HIDDEN_MIN_RESOLVED == 0.5 and route.value({"resolved": 4}, 16) == 0.25
    rows = [{"chosen": "hidden-split", "value": 1.0, "split": 1.0, "below": 0.75},
            {"chosen": "bias-count", "value": 0.25, "split": 0.25, "below": 0.5}]  # ran, not kept by the shipped 0.5
    table = summary(rows, route).splitlines()
    assert "| 0.5 | 1 | 75.0% | +0.0 +- 0.0 |" in table
    assert "| 0 | 2 | 62.5% | -12.5 +- 12.5 |" in table and "| 1 | 1 | 75.0% | +0.0 +- 0.0 |" in table


def test_the_cap_summary_counts_wrong_verified_samples_and_reads_the_cap():
    """Above HIDDEN_MAX_BATCH the shipped route never runs, so the capped reading is the route below; with the cap
    lifted a batch verified at or above HIDDEN_MIN_RESOLVED reads as the split."""
    from benchmarks.labels_split_threshold import cap_summary
    from fedaudit.labels.auto_routes.calibration import HIDDEN_MAX_BATCH

    b = 2 * HIDDEN_MAX_BATCH
    rows = [{"model": "m", "B": b, "chosen": "bias-count", "shipped": 0.5, "value": 0.75, "split": 0.25, "below": 0.5,
             "wrong": 3},
            {"model": "m", "B": b, "chosen": "bias-count", "shipped": 1.0, "value": 0.125, "split": 0.5, "below": 1.0,
             "wrong": 1},
            {"model": "m", "B": b, "chosen": "llg", "shipped": 0.75}]  # hidden-split did not apply
    line = cap_summary(rows).splitlines()[2]
    assert line == f"| m | {b} | 3 | 2 | {round(0.875 * b)} | 4 | 1 | 66.7% | 75.0% |"
