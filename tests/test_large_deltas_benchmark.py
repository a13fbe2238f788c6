"""benchmarks/labels_large_deltas.py: the constants are read only on the clients whose route they act on, each
reading paired with the shipped one."""

from __future__ import annotations

from benchmarks.labels_large_deltas import summary


def _reading(acc: float, same: bool = False) -> dict:
    return {"InsAcc": acc, "seconds": 1.0, **({"same": True} if same else {})}


def test_the_summary_pairs_each_reading_with_the_shipped_one_where_the_constants_act():
    rows = [{"readings": {"shipped": _reading(0.5), "rlu": _reading(0.75), "ensemble": _reading(0.5)}},
            {"readings": {"shipped": _reading(1.0), "rlu": _reading(0.75), "ensemble": _reading(1.0)}},
            # another route answered: every reading is the shipped one, not rerun, and the client is left out
            {"readings": {"shipped": _reading(0.0), "rlu": _reading(0.0, True), "ensemble": _reading(0.0, True)}}]
    table = summary(rows).splitlines()
    assert table[0] == "2 of 3 clients took the route the constants act on"
    assert "| shipped | 2 | 75.0% | +0.0 +- 0.0 | 0 / 0 | 1.0 |" in table
    assert "| rlu | 2 | 75.0% | +0.0 +- 25.0 | 1 / 1 | 1.0 |" in table
    assert not any(line.startswith("| client-fit") for line in table)  # not asked for on any client
    assert summary(rows[2:]) == "0 of 1 clients took the route the constants act on"
