"""The part of ``train-inverter`` and ``train-refiner-critic`` that is the same: an epoch progress bar on
stderr, and Ctrl-C keeping the model trained so far (the trainer raises TrainingInterrupted with it)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from fedaudit.errors import TrainingInterrupted


def train_with_progress(label: str, epochs: int, quiet: bool, train: Callable):
    """Runs ``train(on_epoch)``; returns (model, info, interrupted): Ctrl-C keeps what was trained so far."""
    console = Console(stderr=True)  # the bar only on a terminal: piped, it would leave a blank line
    progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        TextColumn("mse {task.fields[mse]}"), console=console, transient=True,
                        disable=quiet or not console.is_terminal)
    with progress:
        task = progress.add_task("train", total=epochs, mse="-")
        try:
            model, info = train(lambda epoch, mse: progress.update(task, advance=1, mse=f"{mse:.4g}"))
            return model, info, False
        except TrainingInterrupted as exc:
            return exc.model, exc.info, True
