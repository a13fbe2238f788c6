"""``fedaudit capture``: record what a client would upload from images, plus the ground truth apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fedaudit.cli.console import clean, emit_json, err_console, info_line, refuse_existing
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import AllowCustomArchOpt, BaseOpt, BNMode, CheckpointArg, ForceOpt, Kind, QuietOpt, Reduction, SeedOpt, Sign
from fedaudit.errors import InputError


def register(app) -> None:
    @app.command("capture")
    @handle_errors
    def capture(
        checkpoint: CheckpointArg,
        images: Annotated[Path, typer.Argument(help="Folder of image files, one image, or .safetensors with 'images' [N,C,H,W] (and optional "
                                                    "'labels'); for a language-model folder, a UTF-8 text file, one sequence a line.",
                                               show_default=False)],
        output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the recorded update (.safetensors).", show_default=False)],
        batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="Images per local step.", show_default=False)],
        labels: Annotated[Optional[str], typer.Option("--image-labels", help=(
            "The images' classes: '3,8,8,0', or 'names' (trailing number of each file name); omit if the "
            "safetensors has 'labels'. Folders are read in sorted file-name order; the mapping is printed. (Elsewhere "
            "--labels names a label-recovery method.)"))] = None,
        labels_csv: Annotated[Optional[Path], typer.Option("--image-labels-csv", help=(
            "The images' classes as 'file,label' rows, one per image file (instead of --image-labels)."))] = None,
        truth: Annotated[Optional[Path], typer.Option("--truth-out", help=(
            "Also write the ground truth (images in [0,1], labels) here; only metrics read it (it is the --truth "
            "input of labels, reconstruct, audit and score)."))] = None,
        local_steps: Annotated[int, typer.Option("--local-steps", "-k", help="Local SGD steps (FedAvg); batches cycle through the images.")] = 1,
        lr: Annotated[Optional[float], typer.Option("--lr", help="Local learning rate (needed for delta/weights).")] = None,
        kind: Annotated[Optional[Kind], typer.Option("--kind", help="What the client uploads (default: gradient for one step, delta for more).")] = None,
        reduction: Annotated[Reduction, typer.Option("--reduction", help="Loss reduction of a gradient upload.")] = Reduction.mean,
        delta_sign: Annotated[Sign, typer.Option("--delta-sign", help="Sign convention of a delta (TFF uses global_minus_local).")] = Sign.local_minus_global,
        bn_mode: Annotated[BNMode, typer.Option("--bn-mode", help="BatchNorm mode during local training.")] = BNMode.train,
        momentum: Annotated[float, typer.Option("--momentum", help="SGD momentum of local training.")] = 0.0,
        weight_decay: Annotated[float, typer.Option("--weight-decay", help="SGD weight decay of local training.")] = 0.0,
        withhold: Annotated[Optional[list[str]], typer.Option("--withhold", help="Leave tensors matching this glob out of the upload (e.g. 'fc.*'); "
                                                                                 "repeatable.")] = None,
        no_buffers: Annotated[bool, typer.Option("--no-buffers", help="Do not upload BatchNorm buffers with a delta/weights.")] = False,
        include_buffers: Annotated[bool, typer.Option("--include-buffers", help="Attach the BatchNorm buffers to a gradient "
                                                                            "upload too (after the client's forward).")] = False,
        resize: Annotated[bool, typer.Option("--resize", help="Centre-crop and resize images to the model's input size.")] = False,
        device: Annotated[str, typer.Option("--device", envvar="FEDAUDIT_DEVICE", help=(
            "cpu (the default: a recorded update comes out the same on every machine) | auto | cuda | cuda:N"))] = "cpu",
        max_length: Annotated[int, typer.Option("--max-length", help=(
            "Text only: tokens per sequence, the end-of-sequence token included (longer lines are cut)."))] = 32,
        base: BaseOpt = None,
        seed: SeedOpt = 0,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
        allow_custom_arch: AllowCustomArchOpt = False,
    ) -> None:
        """Record a client's upload (FedSGD gradient, or FedAvg delta/weights after K local steps)."""
        from fedaudit.client.capture import CaptureConfig
        from fedaudit.jobs.capture import CaptureJob
        from fedaudit.session import Session

        refuse_existing(output, force)
        refuse_existing(truth, force)
        from fedaudit.io.hf_folder import is_text_checkpoint

        if is_text_checkpoint(checkpoint):
            image_only = {"--image-labels": labels is not None, "--image-labels-csv": labels_csv is not None,
                          "--resize": resize, "--withhold": bool(withhold), "--no-buffers": no_buffers,
                          "--include-buffers": include_buffers,
                          "--momentum with -k 1": momentum != 0.0 and local_steps == 1,
                          "--weight-decay with -k 1": weight_decay != 0.0 and local_steps == 1,
                          "--reduction sum": reduction is Reduction.sum,
                          "--delta-sign global_minus_local": delta_sign is not Sign.local_minus_global,
                          "--kind weights": kind is Kind.weights, "--kind gradient with -k > 1": kind is Kind.gradient and local_steps > 1,
                          "--kind delta with -k 1": kind is Kind.delta and local_steps == 1}
            given = [flag for flag, on in image_only.items() if on]
            if given:
                raise InputError(f"{given[0]} is not supported for a text capture (a language-model folder)")
            from fedaudit.jobs.text_capture import TextCaptureJob

            out = TextCaptureJob(checkpoint, images, batch_size, local_steps, lr, max_length, momentum, weight_decay,
                                 seed, base, device).run_to(output, truth)
            info_line(f"recorded {out['kind']} of {out['num_examples']} text lines (B={batch_size}, K={local_steps}, "
                      f"at most {max_length} tokens each) -> {output}", quiet)
            emit_json(out)
            return
        if no_buffers and include_buffers:
            raise InputError("give either --include-buffers or --no-buffers, not both")
        cfg = CaptureConfig(batch_size=batch_size, local_steps=local_steps, lr=lr, kind=kind.value if kind else None,
                            reduction=reduction.value, delta_sign=delta_sign.value, bn_mode=bn_mode.value,
                            momentum=momentum, weight_decay=weight_decay, withhold=tuple(withhold or ()),
                            include_buffers=False if no_buffers else (True if include_buffers else None))
        session = Session.create(device=device, seed=seed, allow_custom_arch=allow_custom_arch, quiet=quiet, force=force)
        out = CaptureJob(session, checkpoint, images, labels, cfg, resize, labels_csv).run_to(output, truth)
        table = Table("file", "label", "local step", title="images -> labels (the client's data order)")
        for row in out["images"]:
            table.add_row(clean(row["file"]), str(row["label"]), str(row["step"]))
        err_console(quiet).print(table)
        info_line(f"recorded {out['kind']} of {out['num_examples']} images (B={batch_size}, K={local_steps}) -> {output}", quiet)
        emit_json(out)
