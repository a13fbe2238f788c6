"""Progress of a long run on stderr, terminal or not (``--progress auto|bar|lines|off``).

* ``bar``: Rich's live bar (transient: it leaves nothing behind on a terminal);
* ``lines``: one plain line every ``FEDAUDIT_PROGRESS_EVERY`` seconds (default 30) with the phase, iteration, loss,
  elapsed time and ETA, which a CI log, ``nohup`` or a pipeline keeps: a run there printed nothing for minutes;
* ``auto`` (the default): the bar on a terminal, lines elsewhere;
* ``off`` (and ``--quiet``): nothing.

Both displays take the calls the optimisation loop makes (``add_task``, ``update``, ``advance``, a ``with`` block).
Work that has no iterations to count (a label method simulating clients) runs inside a ``Heartbeat``: a line with
the elapsed time every ``FEDAUDIT_PROGRESS_EVERY`` seconds while it runs, so no long step is silent. Code inside it
that knows how far it is (a method's fitting steps, simulated clients) calls :func:`advance`; the lines then show
the share done and the time left, and a run predicted from its own pace after ``WARM_UP`` seconds to take longer
than ``LONG`` says so once, early. Work whose length is known before it starts (the self-check: its clients each
cost about what the reading did) passes ``expected`` seconds and says so up front.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

MODES = ("auto", "bar", "lines", "off")
EVERY = 30.0  # seconds between two progress lines (FEDAUDIT_PROGRESS_EVERY overrides)
LONG = 600.0  # a run predicted (from its own pace after WARM_UP seconds) to take longer says so once, early
WARM_UP = 2.0


class Pace:
    """A run's pace measured after its warm-up, the one rule behind "predicted to take about N min" and the ETA of
    every progress line, for attacks and label methods alike. The first iterations carry one-off costs (allocation,
    autotuning, a first LPIPS or aux pass) or run before the machine's load settles: a pace read from them said "about
    24 min" for a 95 s run and "126 min" for 13 min (issue 90). So the pace starts at a *mark*, the first report after
    ``WARM_UP`` seconds, and a prediction is made once ``WARM_UP`` more seconds and more work have passed since it:
    the time to the mark plus the rest at the pace since the mark."""

    def __init__(self) -> None:
        self.mark: tuple[float, float] | None = None  # (elapsed, fraction done) at the end of the warm-up

    def see(self, elapsed: float, fraction: float) -> None:
        if self.mark is None and elapsed >= WARM_UP and fraction > 0:
            self.mark = (elapsed, fraction)

    def rate(self, elapsed: float, fraction: float) -> float | None:
        """Seconds per unit of fraction since the mark, once measurable (else None)."""
        if self.mark is None:
            return None
        t0, f0 = self.mark
        if elapsed - t0 < WARM_UP or fraction <= f0:
            return None
        return (elapsed - t0) / (fraction - f0)

    def total(self, elapsed: float, fraction: float) -> float | None:
        """The run's whole time: the warm-up as it went, the rest at the pace since (None until measurable)."""
        r = self.rate(elapsed, fraction)
        return None if r is None or self.mark is None else self.mark[0] + r * (1.0 - self.mark[1])

    def left(self, elapsed: float, fraction: float) -> float:
        """Seconds left: at the pace since the mark where measured, else the average so far (nan before any work)."""
        r = self.rate(elapsed, fraction)
        if r is not None:
            return r * (1.0 - fraction)
        return elapsed / fraction * (1.0 - fraction) if fraction > 0 else float("nan")


class LineProgress:
    """Rich's Progress calls, printed as a plain line every ``every`` seconds and once at the end of a task."""

    def __init__(self, every: float):
        self.every = every
        self.tasks: dict[int, dict[str, Any]] = {}

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc) -> None:
        for task in self.tasks.values():
            if task["printed_at"] is not None and task["printed_at"] != task["completed"]:  # close a long task
                self._line(task)

    def add_task(self, description: str, total: float, **fields) -> TaskID:
        now = time.perf_counter()
        self.tasks[len(self.tasks)] = {"description": description, "total": total, "completed": 0.0,
                                       "fields": fields, "start": now, "last": now, "printed_at": None,
                                       "predicted": False, "pace": Pace()}
        return TaskID(len(self.tasks) - 1)

    def update(self, task_id: TaskID, description: str | None = None, **fields) -> None:
        task = self.tasks[task_id]
        if description is not None:
            task["description"] = description
        task["fields"].update(fields)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        task = self.tasks[task_id]
        task["completed"] += advance
        now = time.perf_counter()
        elapsed = now - task["start"]
        share = task["completed"] / task["total"] if task["total"] else 0.0
        task["pace"].see(elapsed, share)
        total = None if task["predicted"] else task["pace"].total(elapsed, share)
        if total is not None:
            task["predicted"] = True
            after = int(task["fields"].get("runs_after") or 0)  # proxy runs of the same attack that follow it
            if total * (1 + after) > LONG:
                more = (f"; with the {after} proxy run{'s' if after != 1 else ''} after it about "
                        f"{total * (1 + after) / 60:.0f} min in all (--proxies sets how many)" if after else "")
                sys.stderr.write(f"fedaudit: {task['description']}: predicted to take about {total / 60:.0f} min at "
                                 f"this pace ({int(task['total'])} iterations){more}; fewer iterations (-n) or a GPU "
                                 "shortens it\n")
                sys.stderr.flush()
        if now - task["last"] >= self.every:
            task["last"] = now
            self._line(task)

    def _line(self, task: dict[str, Any]) -> None:
        elapsed = time.perf_counter() - task["start"]
        done, total = task["completed"], task["total"]
        eta = task["pace"].left(elapsed, done / total) if total else float("nan")
        loss = task["fields"].get("loss", "-")
        sys.stderr.write(f"fedaudit: {task['description']}: {int(done)}/{int(total)}, loss {loss}, elapsed "
                         f"{elapsed:.0f} s, ETA {eta:.0f} s\n")
        sys.stderr.flush()
        task["printed_at"] = done


def progress_display(quiet: bool, mode: str = "auto") -> Progress | LineProgress:
    """The display for a run: Rich's bar, plain lines, or a disabled bar (module docstring)."""
    console = Console(stderr=True)
    if mode == "auto":
        mode = "bar" if console.is_terminal else "lines"
    if mode == "lines" and not quiet:
        return LineProgress(float(os.environ.get("FEDAUDIT_PROGRESS_EVERY", EVERY)))
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    TextColumn("loss {task.fields[loss]}"), console=console, transient=True,
                    redirect_stdout=False, redirect_stderr=False, disable=quiet or mode != "bar")


class Heartbeat:
    """While the ``with`` block runs, a line ``fedaudit: WHAT: running, N s`` every ``FEDAUDIT_PROGRESS_EVERY``
    seconds (default 30) on stderr, from a background thread, with the share done and the time left once the work
    reports them (:func:`advance`); nothing when ``quiet`` or ``mode`` is off, nothing for a block that ends before
    the first line is due. ``expected`` (seconds, known up front) is said when the block starts, if it is long."""

    def __init__(self, what: str, quiet: bool = False, mode: str = "auto", expected: float | None = None):
        self.what, self.active = what, not quiet and mode != "off"
        self.every = float(os.environ.get("FEDAUDIT_PROGRESS_EVERY", EVERY))
        self.expected = expected
        self.fraction: float | None = None
        self.predicted = expected is not None
        self.pace = Pace()
        self._start = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: Any = None

    def _say(self, text: str) -> None:
        if self.active:
            sys.stderr.write(f"fedaudit: {self.what}: {text}\n")
            sys.stderr.flush()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            elapsed = time.perf_counter() - self._start
            line = f"running, {elapsed:.0f} s"
            if self.fraction:
                line += f", {100 * self.fraction:.0f}% done, about {self.pace.left(elapsed, self.fraction):.0f} s left"
            self._say(line)

    def advance(self, fraction: float) -> None:
        self.fraction = min(max(fraction, 0.0), 1.0)
        elapsed = time.perf_counter() - self._start
        self.pace.see(elapsed, self.fraction)
        total = None if self.predicted else self.pace.total(elapsed, self.fraction)
        if total is not None:
            self.predicted = True
            if total > LONG:
                self._say(f"predicted to take about {total / 60:.0f} min at this pace; a GPU, fewer method steps or "
                          "another method shortens it")

    def __enter__(self) -> Heartbeat:
        self._start = time.perf_counter()
        self._token = _CURRENT.set(self)
        if self.expected is not None and self.expected >= self.every:
            long = f"; over {LONG / 60:.0f} min on this machine" if self.expected > LONG else ""
            self._say(f"expected to take about {_duration(self.expected)}{long}")
        if self.active:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


_CURRENT: ContextVar[Heartbeat | None] = ContextVar("fedaudit_heartbeat", default=None)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def advance(done: float, total: float) -> None:
    """Report ``done`` of ``total`` units of the work the enclosing ``Heartbeat`` watches (a no-op outside one)."""
    beat = _CURRENT.get()
    if beat is not None and total > 0:
        beat.advance(done / total)


@contextmanager
def muted():
    """A block whose :func:`advance` calls report to no one (a method re-run inside a self-check, whose own
    progress is counted in clients)."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)
