"""benchmarks/labels_routes.py's per-row test of ``auto`` against the best single method: a tie for best is read
the same whatever order the methods come in, and against the hardest of the tied comparisons."""

from __future__ import annotations

from benchmarks.labels_routes import against_best


def _rows(readings: dict[str, list[float]]) -> list[dict]:
    n = len(next(iter(readings.values())))
    return [{"methods": {m: {"InsAcc": v[i]} for m, v in readings.items()}} for i in range(n)]


def test_a_tie_for_best_is_judged_by_its_hardest_comparison_whatever_the_order():
    # rlu and llg tie on the mean (0.6); auto trails rlu by a noisy 0.1 and llg by a steady 0.1
    readings = {"auto": [0.5, 0.5, 0.5], "rlu": [0.3, 0.6, 0.9], "llg": [0.6, 0.6, 0.6], "zlg": [0.1, 0.2, 0.3]}
    for order in (["rlu", "llg", "zlg"], ["llg", "zlg", "rlu"], ["zlg", "rlu", "llg"]):
        rows = _rows({"auto": readings["auto"], **{m: readings[m] for m in order}})
        best, diff, se, ok = against_best(rows)
        assert best == "llg" and abs(diff + 0.1) < 1e-12 and se == 0.0 and not ok


def test_auto_within_two_points_of_the_best_is_within():
    best, diff, _, ok = against_best(_rows({"auto": [0.99, 0.99], "rlu": [1.0, 1.0], "llg": [0.5, 0.5]}))
    assert best == "rlu" and ok and abs(diff + 0.01) < 1e-12


def test_a_rerun_can_turn_a_threshold_off_where_its_route_reads_it(monkeypatch):
    """``rerun --set NAME=VALUE`` changes the copy the route module imported (the pruning checks of issue 66), and a
    name no route reads is refused rather than silently measuring nothing."""
    import pytest

    import fedaudit.labels.auto_routes.bn_mixture as bn_mixture
    import fedaudit.labels.auto_routes.calibration as calibration
    from benchmarks.labels_routes import set_constant

    monkeypatch.setattr(bn_mixture, "NEAR_AUX_TV", bn_mixture.NEAR_AUX_TV)  # restored after the test
    set_constant("NEAR_AUX_TV", float("-inf"))
    assert bn_mixture.NEAR_AUX_TV == float("-inf") and calibration.NEAR_AUX_TV == 0.25
    with pytest.raises(SystemExit, match="no route reads NO_SUCH_THRESHOLD"):
        set_constant("NO_SUCH_THRESHOLD", 1.0)
