"""``fedaudit train-refiner-critic IMAGES -o critic.safetensors``: Refiner's noise-ratio network D."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedaudit.cli.console import emit_json, info_line, refuse_existing
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import DeviceOpt, ForceOpt, QuietOpt, SeedOpt
from fedaudit.cli.training import train_with_progress
from fedaudit.errors import EXIT_INTERRUPTED, InputError


def _shape(text: str) -> tuple[int, int, int]:
    try:
        c, h, w = (int(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"--image-shape must be C,H,W (e.g. 3,32,32), got {text!r}") from None
    return c, h, w


def register(app) -> None:
    @app.command("train-refiner-critic")
    @handle_errors
    def train_refiner_critic(
        images: Annotated[Path, typer.Argument(help="Public images: a folder of image files, one image, or .safetensors with 'images'.", show_default=False)],
        output: Annotated[Path, typer.Option("--output", "-o", help="Critic file to write (.safetensors).", show_default=False)],
        image_shape: Annotated[str, typer.Option("--image-shape", help="C,H,W of the images the defended model takes.")] = "3,32,32",
        epochs: Annotated[int, typer.Option("--epochs", help="Passes over the images (the paper: 20).")] = 20,
        batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="Images per step, each mixed at 11 noise ratios.")] = 128,
        lr: Annotated[float, typer.Option("--lr", help="Adam step size (the paper: 1e-4).")] = 1e-4,
        width: Annotated[int, typer.Option("--width", help="Channels of the first conv (the paper: 128; then 2w, 4w).")] = 128,
        resize: Annotated[bool, typer.Option("--resize", help="Centre-crop and resize images to --image-shape.")] = False,
        seed: SeedOpt = 0,
        device: DeviceOpt = "auto",
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Train Refiner's evaluation network D (noise proportion of an image) on public images (Ctrl-C saves it)."""
        from fedaudit.defenses.critic import CriticTraining, save_critic, train_critic
        from fedaudit.device import resolve_device
        from fedaudit.io.images import load_images

        refuse_existing(output, force)
        if epochs < 1 or batch_size < 1 or lr <= 0 or width < 1:
            raise InputError("--epochs, --batch-size and --width must be >= 1 and --lr > 0")
        dev = resolve_device(device)
        batch = load_images(images, _shape(image_shape), resize=resize)
        cfg = CriticTraining(epochs=epochs, batch_size=batch_size, lr=lr, width=width, seed=seed)
        critic, info, interrupted = train_with_progress(
            "critic", epochs, quiet, lambda on_epoch: train_critic(batch.images, cfg, on_epoch, dev))
        info["interrupted"] = interrupted
        save_critic(output, critic, info)
        info_line(f"{'interrupted after' if interrupted else 'trained'} {info['epochs_run']} epochs -> {output}", quiet)
        emit_json({"critic": str(output), **info})
        if interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)
