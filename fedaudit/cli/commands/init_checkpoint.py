"""``fedaudit init-checkpoint ARCH``: a randomly initialised global model, e.g. for audits of round 0."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedaudit.cli.commands.spec_options import ArchKwargsOpt, InputShapeOpt, MeanOpt, NumClassesOpt, StdOpt, make_spec
from fedaudit.cli.console import emit_json, info_line, refuse_existing
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import AllowCustomArchOpt, ForceOpt, QuietOpt, SeedOpt


def register(app) -> None:
    @app.command("init-checkpoint")
    @handle_errors
    def init_checkpoint(
        arch: Annotated[str, typer.Argument(help="Registered name (see 'fedaudit models') or module:factory.", show_default=False)],
        output: Annotated[Path, typer.Option("--output", "-o", help="Checkpoint to write.", show_default=False)],
        num_classes: NumClassesOpt = 10,
        input_shape: InputShapeOpt = None,
        mean: MeanOpt = None,
        std: StdOpt = None,
        arch_kwargs: ArchKwargsOpt = None,
        random_weights: Annotated[bool, typer.Option("--random-weights", help="Random init even where the architecture has "
                                                                          "published initial weights (the untrained control).")] = False,
        seed: SeedOpt = 0,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
        allow_custom_arch: AllowCustomArchOpt = False,
    ) -> None:
        """Write a round-0 checkpoint of ARCH: its published initial weights (e.g. alexnet-imagenet's ImageNet
        convolutions) or a seeded random init."""
        import torch

        from fedaudit.io.checkpoint import check_forward, check_spec, save_checkpoint
        from fedaudit.io.files import sha256_file
        from fedaudit.models.build import initial_model

        refuse_existing(output, force)
        spec = make_spec(arch, num_classes, input_shape, mean, std, arch_kwargs)
        check_spec(spec, "init-checkpoint", allow_custom_arch)  # before anything is allocated: a checkpoint's rules
        torch.manual_seed(seed)
        model, weights = initial_model(spec, pretrained=not random_weights, allow_custom=allow_custom_arch)
        check_forward(model, spec, f"architecture {arch!r}")
        save_checkpoint(output, model, spec)
        info_line(f"wrote {arch} checkpoint ({sum(p.numel() for p in model.parameters())} parameters, {weights}) -> {output}", quiet)
        emit_json({"checkpoint": str(output), "sha256": sha256_file(output), "arch": arch, "seed": seed, "weights": weights,
                   "input_shape": list(spec.input_shape), "mean": list(spec.mean), "std": list(spec.std)})
