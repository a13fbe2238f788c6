"""benchmarks/hidden_split_labels.py: the summary counts wrong labels and the labels the rank test passes, and the
traced peel records what hidden-split verified (the trace is off in the method itself)."""

from __future__ import annotations

import torch

from benchmarks.hidden_split_labels import _TracedPeel, summary
from fedaudit.labels import hidden_split


def _v(label, true, scores, passing):
    return {"label": label, "true": true, "scores": scores, "passing": passing, "cos": 1.0, "growth": 1.0}


def test_the_summary_reads_wrong_labels_against_the_right_ones_scores():
    rows = [{"model": "m", "B": 32, "verified": [_v(0, 0, [1e-6, 1.0, 1.0], [0]),
                                                  _v(1, 2, [1.0, 5e-3, 1.0], [0, 1, 2]),
                                                  _v(2, 2, [1.0, 1.0, 6e-3], [1, 2])]},
            {"model": "m", "B": 32, "verified": [_v(1, 1, [1.0, 1e-3, 1.0], [0, 1, 2])]},
            {"model": "m", "B": 48, "verified": []}]
    table = summary(rows).splitlines()
    assert "| m | 32 | 2 | 4 | 1 | 3 | 2 | 5.0e-03 .. 5.0e-03 | 0 of 3 |" in table
    assert "| m | 48 | 1 | 0 | 0 | 0 | 0 | - | 0 of 0 |" in table


def test_the_method_keeps_no_trace_and_the_benchmarks_peel_does():
    m = torch.randn(6, 3, dtype=torch.float64) @ torch.randn(3, 9, dtype=torch.float64)
    tail = torch.nn.Linear(6, 4).double()
    _TracedPeel.made = []
    plain = hidden_split._Peel(m, torch.randn(6, 9, dtype=torch.float64), tail, 3, 30.0)
    traced = _TracedPeel(m, torch.randn(6, 9, dtype=torch.float64), tail, 3, 30.0)
    assert plain.trace is None and traced.trace == [] and _TracedPeel.made == [traced]
