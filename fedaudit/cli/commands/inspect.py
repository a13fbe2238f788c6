"""``fedaudit inspect CKPT UPDATE``: what the update holds and which methods apply (JSON on stdout)."""

from __future__ import annotations

from rich.table import Table

from fedaudit.cli.console import check_output_file, clean, emit_json, err_console
from fedaudit.cli.errors import handle_errors
from fedaudit.cli.options import AllowCustomArchOpt, BaseOpt, CheckpointArg, ForceOpt, IgnoreBaseOpt, OutputOpt, QuietOpt, UpdateArg
from fedaudit.errors import InputError


def _table(info: dict, model: str) -> Table:
    """Each parameter: shape, shared or withheld, its gradient's norm (``model``: the title's name of the model)."""
    t = Table("parameter", "shape", "shared", "grad norm", title=(
        f"{model} | kind={info['kind']} B={info['batch_size']} K={info['local_steps']} "
        f"| {len(info['parameters_present'])} shared, {len(info['parameters_absent'])} withheld"))
    for row in info["layers"]:
        norm = row.get("grad_norm")
        t.add_row(clean(row["name"]), "x".join(map(str, row["shape"])), "yes" if row["present"] else "NO",
                  "NaN/Inf" if row.get("finite") is False else ("" if norm is None else f"{norm:.4g}"))
    return t


def _inspect_text(checkpoint, update, output, quiet: bool, ignore_base_mismatch: bool, base) -> None:
    from fedaudit.text_inspection import inspect_text_threat_model
    from fedaudit.text_threat_model import load_text_threat_model

    tm = load_text_threat_model(checkpoint, update, base=base, check_base=not ignore_base_mismatch, allow_nonfinite=True)
    info = inspect_text_threat_model(tm)
    emit_json(info, output)
    con = err_console(quiet)
    con.print(_table(info, f"{info['checkpoint']['model_type']} (d={info['checkpoint']['width']})"))
    for name, a in info["attacks"].items():
        con.print(f"{name}: " + ("applies" if a["applicable"] else "not applicable: " + clean("; ".join(a["why_not"]))))
    for w in info["warnings"]:
        con.print(f"warning: {clean(w)}")
    if tm.nonfinite:
        raise InputError(f"update {str(update)!r}: {len(tm.nonfinite)} tensor(s) contain NaN or Inf "
                         f"(first: {tm.nonfinite[0]!r})")


def register(app) -> None:
    @app.command("inspect")
    @handle_errors
    def inspect(checkpoint: CheckpointArg, update: UpdateArg, output: OutputOpt = None, force: ForceOpt = False,
                quiet: QuietOpt = False, allow_custom_arch: AllowCustomArchOpt = False,
                ignore_base_mismatch: IgnoreBaseOpt = False, base: BaseOpt = None) -> None:
        """Describe a recorded update: kind, batch, steps, shared/withheld tensors, norms, NaN/Inf, applicable methods.

        Exit 2 (after printing the JSON) when the update holds NaN or Inf.
        """
        from fedaudit.inspection import inspect_threat_model
        from fedaudit.threat_model import load_threat_model

        check_output_file(output, force)
        from fedaudit.io.hf_folder import is_text_checkpoint

        if is_text_checkpoint(checkpoint):
            _inspect_text(checkpoint, update, output, quiet, ignore_base_mismatch, base)
            return
        if base is not None:
            raise InputError("--base is for a LoRA adapter folder (a text checkpoint)")
        tm = load_threat_model(checkpoint, update, allow_custom_arch=allow_custom_arch, allow_nonfinite=True,
                               check_base=not ignore_base_mismatch)
        info = inspect_threat_model(tm)
        emit_json(info, output)
        con = err_console(quiet)
        con.print(_table(info, info['checkpoint']['arch']))
        for w in info["warnings"]:
            con.print(f"warning: {clean(w)}")
        if tm.nonfinite:
            raise InputError(f"update {str(update)!r}: {len(tm.nonfinite)} tensor(s) contain NaN or Inf "
                             f"(first: {tm.nonfinite[0]!r})")
