"""``fedaudit train-inverter CKPT IMAGES -o inverter.safetensors``: a feature-to-image decoder for RGLA."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedaudit.cli.console import emit_json, info_line, refuse_existing
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import AllowCustomArchOpt, BNMode, CheckpointArg, DeviceOpt, ForceOpt, QuietOpt, SeedOpt
from fedaudit.cli.training import train_with_progress
from fedaudit.errors import EXIT_INTERRUPTED, InputError


def register(app) -> None:
    @app.command("train-inverter")
    @handle_errors
    def train_inverter_cmd(
        checkpoint: CheckpointArg,
        images: Annotated[Path, typer.Argument(help="Public images: a folder of image files, one image, or .safetensors with 'images' "
                                                    "[N,C,H,W].", show_default=False)],
        output: Annotated[Path, typer.Option("--output", "-o", help="Inverter file to write (.safetensors).", show_default=False)],
        epochs: Annotated[int, typer.Option("--epochs", help="Passes over the images.")] = 30,
        batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="Images per training step.")] = 32,
        lr: Annotated[float, typer.Option("--lr", help="Adam step size (cosine-annealed over the epochs).")] = 1e-3,
        width: Annotated[int, typer.Option("--width", help="Channels of the last upsampling stage (4w, 2w, w).")] = 32,
        no_flip: Annotated[bool, typer.Option("--no-flip", help="Do not add mirrored copies of the images.")] = False,
        bn_mode: Annotated[BNMode, typer.Option("--bn-mode", help="BatchNorm mode of the backbone when computing features (match the "
                                                                  "update's).")] = BNMode.eval,
        resize: Annotated[bool, typer.Option("--resize", help="Centre-crop and resize images to the model's input size.")] = False,
        seed: SeedOpt = 0,
        device: DeviceOpt = "auto",
        force: ForceOpt = False,
        quiet: QuietOpt = False,
        allow_custom_arch: AllowCustomArchOpt = False,
    ) -> None:
        """Train a decoder from this checkpoint's output-layer inputs to images (RGLA's last stage; Ctrl-C saves it)."""
        from fedaudit.device import resolve_device
        from fedaudit.io.checkpoint import load_checkpoint
        from fedaudit.io.images import load_images
        from fedaudit.io.inverter import save_inverter
        from fedaudit.models.registry import final_linear
        from fedaudit.models.train_inverter import InverterTraining, train_inverter

        refuse_existing(output, force)
        if epochs < 1 or batch_size < 2 or lr <= 0 or width < 1:
            raise InputError("--epochs must be >= 1, --batch-size >= 2, --lr > 0 and --width >= 1")
        dev = resolve_device(device)
        ckpt = load_checkpoint(checkpoint, allow_custom_arch=allow_custom_arch)
        ckpt.model.to(dev)  # the backbone's features and the inverter's training run there
        final = final_linear(ckpt.model)
        if final is None:
            raise InputError("the model has no linear output layer, so there is no feature to invert")
        batch = load_images(images, ckpt.spec.input_shape, resize=resize)
        if batch.images.shape[0] < 2:
            raise InputError(f"{str(images)!r} holds {batch.images.shape[0]} image(s); training needs at least 2")
        cfg = InverterTraining(epochs=epochs, batch_size=batch_size, lr=lr, width=width, flip=not no_flip,
                               bn_mode=bn_mode.value, seed=seed)
        info_line(f"train-inverter: {ckpt.spec.arch}, {batch.images.shape[0]} images, {epochs} epochs, on {dev}", quiet)
        inverter, info, interrupted = train_with_progress(
            "inverter", epochs, quiet, lambda on_epoch: train_inverter(ckpt.model, ckpt.spec, final, batch.images, cfg, on_epoch))
        info["interrupted"] = interrupted
        save_inverter(output, inverter, ckpt.sha256, bn_mode.value, info)
        val = info.get("validation_psnr")
        info_line(f"{'interrupted after' if interrupted else 'trained'} {info['epochs_run']} epochs"
                  + (f", validation PSNR {val:.2f} dB" if val is not None else "") + f" -> {output}", quiet)
        emit_json({"inverter": str(output), "checkpoint_sha256": ckpt.sha256, **info})
        if interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)
