"""The verdict benchmark's reading (benchmarks/verdict_transfer.py): what counts as an under-report, before and after."""

from __future__ import annotations

from benchmarks.verdict_transfer import cases, old_measured, scores, table


def row(measured: str, est: str, est_range: list[str], rule: str, paper: str = "low", identified: float = 0.0) -> dict:
    return {"id": 0, "model": "lenet-dlg", "source": "mnist", "B": 1, "K": 1, "attack": "ig", "defense": "none",
            "iterations": 100, "seconds": 4.0, "attack_seconds": 1.0, "proxy_seconds": 3.0, "proxies": 3,
            "measured": {"band": measured, "range": [measured, measured], "psnr": 12.0, "above_floor": 0.5,
                         "identified": identified, "paper_band": paper},
            "estimate": {"band": est, "range": est_range}, "rule": {"band": rule, "range": [rule, rule]}}


def test_an_under_report_is_an_upper_end_below_the_measured_point():
    rows = [row("high", "medium", ["low", "medium"], "high"), row("high", "medium", ["low", "high"], "high"),
            row("low", "low", ["low", "medium"], "low")]
    s = scores(rows, "estimate")
    assert s["runs"] == 3 and s["under"] == 1 and abs(s["point_under_rate"] - 2 / 3) < 1e-9
    assert abs(s["exact_rate"] - 1 / 3) < 1e-9 and s["median_width"] == 1


def test_the_old_measured_band_is_the_worse_of_the_paper_band_and_the_raw_identification_band():
    assert old_measured(row("low", "low", ["low", "low"], "low", paper="medium", identified=1.0)) == "very_high"
    assert old_measured(row("low", "low", ["low", "low"], "low", paper="medium", identified=0.0)) == "medium"
    text = table([row("low", "low", ["low", "medium"], "very_high", paper="medium", identified=1.0)])
    assert "| calibrated on proxies (today's placement) |" in text and "frozen rule, point only (before)" in text
    assert "Cost (CPU, one thread)" in text


def test_the_grid_is_seeded_and_within_the_cpu_budget():
    grid = cases(60)
    assert grid == cases(60)
    assert all(c["B"] <= 4 or c["model"].startswith("lenet") for c in grid)
    assert all(c["B"] == 1 and c["restarts"] == 1 for c in grid if c["model"] == "vgg16-pretrained")


def test_the_placement_frontier_counts_runs_above_every_proxy_and_the_alarm_floor():
    from benchmarks.verdict_placements import bound, place

    def rec(score: float, band: str, upper: str) -> dict:
        return {"score_db": score, "measured": {"band": band, "range": [band, upper]}}

    recs = [rec(10.0, "low", "high"), rec(11.0, "low", "low"), rec(12.0, "medium", "medium")]
    rule = {"band": "high", "range": ["medium", "very_high"], "score_db": 12.5}  # above every proxy, within 1.3 dB
    assert place(rule, recs, "points") == {"band": "medium", "range": ["low", "very_high"]}
    assert place(rule, recs, "points, +1 level above") == {"band": "medium", "range": ["low", "high"]}
    assert place(rule, recs, "points, rule beyond 1.3 dB")["range"] == ["low", "high"]
    assert place({**rule, "score_db": 14.0}, recs, "points, rule beyond 1.3 dB")["range"] == ["low", "very_high"]
    assert place({**rule, "score_db": 11.5}, recs, "upper ends, rule beyond 1.3 dB")["range"] == ["low", "high"]
    rows = [{"measured": {"band": "high"}, "proxy_records": recs},
            {"measured": {"band": "low"}, "proxy_records": [rec(1.0, "high", "high"), rec(2.0, "low", "low")]}]
    assert bound(rows) == {"runs": 2, "above_every_proxy": 1, "proxies_disagree": 2, "quiet": 1, "quiet_proxy_high": 1}
