"""Progress on every long run, terminal or not (issue 65): plain lines when stderr is a file or a pipe."""

from __future__ import annotations

import sys

import pytest

from fedaudit.progress import LineProgress, progress_display

from .helpers import sample


def test_a_reconstruction_piped_to_a_log_leaves_progress_lines(tmp_path, capsys, monkeypatch):
    """The entry point's main() in process, its stderr captured (not a terminal, as in CI or under nohup)."""
    from fedaudit.cli.app import main

    ckpt, upd, _ = sample("lenet_b1")
    for name, value in (("NO_COLOR", "1"), ("FEDAUDIT_PROGRESS_EVERY", "0.1"), ("FEDAUDIT_PROXIES", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["fedaudit", "reconstruct", "ig", str(ckpt), str(upd), "-o", str(tmp_path / "o"),
                                      "-n", "150"])
    with pytest.raises(SystemExit) as stopped:
        main()
    err = capsys.readouterr().err
    assert stopped.value.code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("fedaudit: ig restart 1/1: ")]
    assert len(lines) >= 2, err
    assert all("loss" in ln and "elapsed" in ln and "ETA" in ln for ln in lines)
    assert lines[-1].split(": ")[2].startswith("150/150")  # the last line is the finished count
    assert "fedaudit: proxy 1/1:" in err  # the proxy's own lines say whose they are


def test_the_display_follows_the_mode():
    assert isinstance(progress_display(False, "lines"), LineProgress)
    assert not isinstance(progress_display(True, "lines"), LineProgress)  # --quiet wins
    assert progress_display(False, "off").disable and progress_display(False, "auto") is not None


def test_a_label_method_that_runs_long_prints_a_heartbeat(capsys, monkeypatch):
    import time

    from fedaudit.progress import Heartbeat

    monkeypatch.setenv("FEDAUDIT_PROGRESS_EVERY", "0.05")
    with Heartbeat("labels client-fit"):
        time.sleep(0.3)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("fedaudit: labels client-fit: running, ")]
    assert len(lines) >= 2
    with Heartbeat("labels quiet", quiet=True):
        time.sleep(0.15)
    with Heartbeat("labels short"):  # ends before its first line is due
        pass
    assert capsys.readouterr().err == ""


def test_a_run_predicted_past_ten_minutes_says_so_early(capsys, monkeypatch):
    import time

    from fedaudit import progress

    monkeypatch.setattr(progress, "WARM_UP", 0.05)
    with LineProgress(every=1e9) as display:
        task = display.add_task("ig restart 1/1", total=1e9, loss="-")
        time.sleep(0.06)
        display.advance(task)  # the warm-up ends here: the pace is read from now on
        display.advance(task)
        assert "predicted" not in capsys.readouterr().err  # not yet measurable
        time.sleep(0.06)
        display.advance(task)
    err = capsys.readouterr().err
    assert err.count("predicted to take about") == 1 and "fewer iterations (-n)" in err


def test_a_heartbeat_shows_the_share_done_and_predicts_a_long_run_early(capsys, monkeypatch):
    """Work that reports how far it is (``advance``) gets the share done and the time left in its lines, and a
    pace that projects past ``LONG`` says so once; outside a heartbeat or inside ``muted`` the calls report nothing."""
    import time

    from fedaudit import progress

    monkeypatch.setenv("FEDAUDIT_PROGRESS_EVERY", "0.05")
    monkeypatch.setattr(progress, "WARM_UP", 0.02)
    progress.advance(1, 2)  # no heartbeat: a no-op
    with progress.Heartbeat("labels rlu") as beat:
        time.sleep(0.03)
        progress.advance(1, 100_000)  # the warm-up ends here
        time.sleep(0.03)
        progress.advance(2, 100_000)  # 0.03 s for 1/100,000 since: about 50 min at this pace
        with progress.muted():
            progress.advance(99_999, 100_000)
        assert beat.fraction == 2e-5
        progress.advance(1, 4)
        time.sleep(0.2)
    err = capsys.readouterr().err
    assert err.count("predicted to take about") == 1 and "labels rlu: predicted to take about" in err
    lines = [ln for ln in err.splitlines() if "running" in ln]
    assert any("25% done, about" in ln for ln in lines) and all("s left" in ln for ln in lines if "% done" in ln)


def test_work_of_known_length_says_so_up_front(capsys, monkeypatch):
    from fedaudit.progress import Heartbeat

    monkeypatch.setenv("FEDAUDIT_PROGRESS_EVERY", "30")
    with Heartbeat("labels auto self-check (8 simulated clients)", expected=900):
        pass
    with Heartbeat("labels auto self-check (8 simulated clients)", expected=40):
        pass
    with Heartbeat("short", expected=5):  # shorter than one progress line: nothing said
        pass
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["fedaudit: labels auto self-check (8 simulated clients): expected to take about 15 min; over 10 "
                     "min on this machine",
                     "fedaudit: labels auto self-check (8 simulated clients): expected to take about 40 s"]


@pytest.mark.slow
def test_a_simulating_label_method_reports_how_far_it_is(tmp_path, capsys, monkeypatch):
    """client-fit (simulated clients, unrolled local steps) through the entry point, stderr not a terminal."""
    from fedaudit.cli.app import main

    ckpt, upd, _ = sample("lenet_fedavg_k3")
    monkeypatch.setenv("FEDAUDIT_PROGRESS_EVERY", "0.1")
    monkeypatch.setattr(sys, "argv", ["fedaudit", "labels", "client-fit", str(ckpt), str(upd), "--dummy",
                                      "--iterations", "12", "-o", str(tmp_path / "cf.json")])
    with pytest.raises(SystemExit) as stopped:
        main()
    err = capsys.readouterr().err
    assert stopped.value.code == 0, err
    assert any(ln.startswith("fedaudit: labels client-fit: running") and "% done, about" in ln
               for ln in err.splitlines()), err


def test_the_pace_is_read_after_the_warm_up_not_from_the_first_iteration(monkeypatch):
    """Issue 90: the first ETA lines were wrong both ways ("about 24 min" for 95 s; "126 min" for 13 min): a slow first
    iteration (allocation, a first pass) set the pace of the whole run. Here the first of 1,000 iterations takes 10 s
    and each other 0.1 s: the whole run takes about 110 s."""
    from fedaudit import progress

    clock = {"t": 0.0}
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock["t"])
    pace, said = progress.Pace(), []
    display = progress.LineProgress(every=1e9)
    monkeypatch.setattr(progress.sys.stderr, "write", said.append)
    task = display.add_task("ig restart 1/1", total=1000, loss="-")
    clock["t"] += 10.0
    display.advance(task)
    pace.see(10.0, 0.001)
    assert pace.total(10.0, 0.001) is None  # the old rule said 10,000 s here
    for i in range(2, 1001):
        clock["t"] += 0.1
        display.advance(task)
        if i == 100:
            total = pace.total(10.0 + 0.1 * (i - 1), i / 1000)
            assert total is not None and abs(total - 109.9) < 1.0
            assert abs(pace.left(10.0 + 0.1 * (i - 1), i / 1000) - 0.1 * (1000 - i)) < 0.5
    assert not any("predicted to take" in s for s in said)  # 110 s is under LONG: nothing said


def test_the_prediction_counts_the_proxy_runs_that_follow(capsys, monkeypatch):
    """Issue 87: a run with --proxies P says what the P proxy runs after it add, even when the run alone is short."""
    import time

    from fedaudit import progress

    monkeypatch.setattr(progress, "WARM_UP", 0.05)
    monkeypatch.setattr(progress, "LONG", 1000.0)
    with LineProgress(every=1e9) as display:
        task = display.add_task("ig", total=10_000, loss="-", runs_after=3)
        time.sleep(0.06)
        display.advance(task)
        time.sleep(0.1)
        display.advance(task)  # about 0.1 s an iteration: ~1,000 s alone, ~4,000 s with the three proxy runs
        display.advance(task)
    err = capsys.readouterr().err
    assert "with the 3 proxy runs after it about" in err and "--proxies sets how many" in err
