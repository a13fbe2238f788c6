"""``fedaudit import ...``: bring other formats into fedaudit's safetensors files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from fedaudit.cli.commands.spec_options import ArchKwargsOpt, InputShapeOpt, MeanOpt, NumClassesOpt, StdOpt, make_spec
from fedaudit.cli.console import emit_json, info_line, refuse_existing
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import AllowCustomArchOpt, BNMode, ForceOpt, Kind, QuietOpt, Sign
from fedaudit.errors import InputError

# the local-training options both update importers take
BNModeOpt = Annotated[Optional[BNMode], typer.Option("--bn-mode", help="BatchNorm mode of local training, if known.",
                                                     show_default=False)]
MomentumOpt = Annotated[float, typer.Option("--momentum", help="SGD momentum of local training.")]
WeightDecayOpt = Annotated[float, typer.Option("--weight-decay", help="SGD weight decay of local training.")]

import_app = typer.Typer(no_args_is_help=True, help="Convert other formats into fedaudit's safetensors files.")


@import_app.command("flower-npz")
@handle_errors
def flower_npz(
    arrays: Annotated[Path, typer.Argument(help=".npz of positional arrays (np.savez(path, *ndarrays)).", show_default=False)],
    checkpoint: Annotated[Path, typer.Option("--checkpoint", "-c", help="The round's global checkpoint (names and order come from its "
                                                                        "architecture).", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Recorded update to write.", show_default=False)],
    kind: Annotated[Kind, typer.Option("--kind", help="What the arrays are (Flower clients send full weights).")] = Kind.weights,
    order: Annotated[str, typer.Option("--order", help="state_dict (buffers included, Flower examples) or parameters.")] = "state_dict",
    delta_sign: Annotated[Sign, typer.Option("--delta-sign", help="For kind=delta: local_minus_global or global_minus_local (TFF).")] = Sign.local_minus_global,
    reduction: Annotated[str, typer.Option("--reduction", help="For kind=gradient: mean or sum.")] = "mean",
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", "-b", help="Images per local step on the client (most label "
                                                                           "methods need it).", show_default=False)] = None,
    local_steps: Annotated[int, typer.Option("--local-steps", "-k", help="Local SGD steps the client ran (FedAvg).")] = 1,
    lr: Annotated[Optional[float], typer.Option("--lr", help="Client learning rate (needed for delta/weights).", show_default=False)] = None,
    num_examples: Annotated[Optional[int], typer.Option("--num-examples", help="Examples the client trained on (Flower's "
                                                                               "num_examples).", show_default=False)] = None,
    bn_mode: BNModeOpt = None,
    momentum: MomentumOpt = 0.0,
    weight_decay: WeightDecayOpt = 0.0,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
    allow_custom_arch: AllowCustomArchOpt = False,
) -> None:
    """Import a Flower-style positional .npz (allow_pickle=False) as a recorded update."""
    from fedaudit.io.checkpoint import load_checkpoint
    from fedaudit.io.flower import npz_update
    from fedaudit.io.update import save_update

    refuse_existing(output, force)
    ckpt = load_checkpoint(checkpoint, allow_custom_arch=allow_custom_arch)
    tensors, meta = npz_update(arrays, ckpt.model, ckpt.sha256, kind=kind.value, order=order,
                               delta_sign=delta_sign.value, reduction=reduction, batch_size=batch_size,
                               local_steps=local_steps, lr=lr, num_examples=num_examples,
                               bn_mode=bn_mode.value if bn_mode else None, momentum=momentum, weight_decay=weight_decay)
    save_update(output, tensors, meta)
    info_line(f"imported {len(tensors)} arrays as a {kind.value} update -> {output}", quiet)
    emit_json({"update": str(output), "tensors": len(tensors), "kind": kind.value, "order": order})


@import_app.command("update")
@handle_errors
def update_cmd(
    save: Annotated[Path, typer.Argument(help="A plain safetensors save: {name: param.grad} or new_state - old_state.",
                                         show_default=False)],
    checkpoint: Annotated[Path, typer.Option("--checkpoint", "-c", help="The round's global checkpoint (the model the "
                                                                        "names belong to).", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Recorded update to write.", show_default=False)],
    kind: Annotated[Kind, typer.Option("--kind", help="What the tensors are: gradient (param.grad), delta "
                                                     "(new - old) or weights (the new state).")] = Kind.gradient,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", "-b", help="Images per local step.",
                                                      show_default=False)] = None,
    local_steps: Annotated[int, typer.Option("--local-steps", "-k", help="Local SGD steps (delta, weights).")] = 1,
    lr: Annotated[Optional[float], typer.Option("--lr", help="Client learning rate (delta, weights).",
                                                show_default=False)] = None,
    delta_sign: Annotated[Sign, typer.Option("--delta-sign", help="For a delta: local_minus_global or "
                                                                  "global_minus_local.")] = Sign.local_minus_global,
    reduction: Annotated[str, typer.Option("--reduction", help="For a gradient: mean or sum over the batch.")] = "mean",
    bn_mode: BNModeOpt = None,
    momentum: MomentumOpt = 0.0,
    weight_decay: WeightDecayOpt = 0.0,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
    allow_custom_arch: AllowCustomArchOpt = False,
) -> None:
    """Import a plain PyTorch save (no fedaudit metadata) as a recorded update, the recipe given here."""
    from fedaudit.io.checkpoint import load_checkpoint
    from fedaudit.io.plain_update import plain_update
    from fedaudit.io.update import save_update

    refuse_existing(output, force)
    if reduction not in ("mean", "sum"):
        raise InputError("--reduction must be mean or sum")
    ckpt = load_checkpoint(checkpoint, allow_custom_arch=allow_custom_arch)
    tensors, meta = plain_update(save, ckpt.model, ckpt.sha256, kind=kind.value, batch_size=batch_size,
                                 local_steps=local_steps, lr=lr, delta_sign=delta_sign.value, reduction=reduction,
                                 bn_mode=bn_mode.value if bn_mode else None, momentum=momentum,
                                 weight_decay=weight_decay)
    save_update(output, tensors, meta)
    info_line(f"imported {len(tensors)} tensors as a {kind.value} update -> {output}", quiet)
    emit_json({"update": str(output), "tensors": len(tensors), "kind": kind.value})


@import_app.command("checkpoint")
@handle_errors
def checkpoint_cmd(
    state: Annotated[Path, typer.Argument(help="A state_dict: .safetensors, or .pt/.pth with --allow-pickle.", show_default=False)],
    arch: Annotated[str, typer.Option("--arch", help="Registered name (fedaudit models) or module:factory.", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Checkpoint to write.", show_default=False)],
    num_classes: NumClassesOpt = 10,
    input_shape: InputShapeOpt = None,
    mean: MeanOpt = None,
    std: StdOpt = None,
    arch_kwargs: ArchKwargsOpt = None,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Read a .pt/.pth with torch.load(weights_only=True). Only for files you trust.")] = False,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
    allow_custom_arch: AllowCustomArchOpt = False,
) -> None:
    """Wrap a plain state_dict into a fedaudit checkpoint (architecture + normalisation metadata)."""
    import torch

    from fedaudit.io.checkpoint import check_forward, load_state_strict, save_checkpoint
    from fedaudit.io.files import PICKLE_SUFFIXES, check_readable, read_safetensors
    from fedaudit.models import build_model

    refuse_existing(output, force)
    spec = make_spec(arch, num_classes, input_shape, mean, std, arch_kwargs)
    model = build_model(spec, allow_custom=allow_custom_arch)
    src = Path(state)
    if src.suffix.lower() in PICKLE_SUFFIXES:
        check_readable(src, "state_dict")
        if not allow_pickle:
            raise InputError(f"{str(src)!r} is a pickle; refusing to load it without --allow-pickle")
        try:
            tensors = torch.load(src, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is bad input
            raise InputError(f"cannot load {str(src)!r} with weights_only=True: {exc}") from None
        if isinstance(tensors, dict) and isinstance(tensors.get("state_dict"), dict):
            tensors = tensors["state_dict"]
        if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
            raise InputError(f"{str(src)!r} does not hold a state_dict (a dict of tensors)")
    else:
        tensors, _ = read_safetensors(src, "state_dict")
    load_state_strict(model, tensors, f"state_dict {str(src)!r}")
    check_forward(model, spec, f"state_dict {str(src)!r}")
    save_checkpoint(output, model, spec)
    info_line(f"wrote checkpoint for {arch} -> {output}", quiet)
    emit_json({"checkpoint": str(output), "arch": arch, "tensors": len(tensors)})


def register(app) -> None:
    app.add_typer(import_app, name="import")
