"""benchmarks/labels_split_threshold.py's summary: each threshold reads a batch as sample-split's answer where the
fit is at most the threshold and as the route below it otherwise, paired against the shipped SPLIT_MAX_FIT."""

from __future__ import annotations

from benchmarks.labels_split_threshold import summary
from fedaudit.labels.auto_routes.calibration import SPLIT_MAX_FIT


def test_the_summary_reads_each_threshold_from_both_readings():
    rows = [{"chosen": "sample-split", "fit": 1e-6, "shipped": 1.0, "below": 0.5},
            {"chosen": "sample-split", "fit": 5e-3, "shipped": 0.5, "below": 1.0},
            {"chosen": "bias-count", "fit": None, "shipped": 0.75}]
    assert SPLIT_MAX_FIT == 1e-2
    table = summary(rows).splitlines()
    assert table[0] == "2 of 3 batches went to sample-split (fits 1.0e-06 .. 5.0e-03)"
    assert "| 0.01 | 2 | 75.0% | +0.0 +- 0.0 |" in table  # the shipped threshold keeps both answers
    assert "| 0.001 | 1 | 100.0% | +25.0 +- 25.0 |" in table  # the second batch goes to the route below (1.0)
    assert "| inf | 2 | 75.0% | +0.0 +- 0.0 |" in table
    assert summary([rows[2]]) == "no batch went to sample-split"
