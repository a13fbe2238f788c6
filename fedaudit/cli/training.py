"""The part of ``train-inverter`` and ``train-refiner-critic`` that is the same: an epoch progress bar on
stderr, and Ctrl-C keeping the model trained so far (the trainer attaches it to the KeyboardInterrupt)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


def train_with_progress(label: str, epochs: int, quiet: bool, train: Callable, attribute: str):
    """Runs ``train(on_epoch)``; returns (model, info, interrupted). ``attribute`` names the model the trainer
    attaches to a KeyboardInterrupt (with ``info``)."""
    progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        TextColumn("mse {task.fields[mse]}"), console=Console(stderr=True), transient=True, disable=quiet)
    with progress:
        task = progress.add_task("train", total=epochs, mse="-")
        try:
            model, info = train(lambda epoch, mse: progress.update(task, advance=1, mse=f"{mse:.4g}"))
            return model, info, False
        except KeyboardInterrupt as exc:
            if not hasattr(exc, attribute):
                raise
            return getattr(exc, attribute), exc.info, True
