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


def _text(checkpoint, update, ignore_base_mismatch: bool, base) -> tuple[dict, str, list[str]]:
    """A language-model folder's inspection: the JSON, the table's title and a line per text attack."""
    from fedaudit.text_inspection import inspect_text_threat_model
    from fedaudit.text_threat_model import load_text_threat_model

    tm = load_text_threat_model(checkpoint, update, base=base, check_base=not ignore_base_mismatch, allow_nonfinite=True)
    info = inspect_text_threat_model(tm)
    lines = [f"{name}: " + ("applies" if a["applicable"] else "not applicable: " + clean("; ".join(a["why_not"])))
             for name, a in info["attacks"].items()]
    return info, f"{info['checkpoint']['model_type']} (d={info['checkpoint']['width']})", lines


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
            info, model, lines = _text(checkpoint, update, ignore_base_mismatch, base)
        elif base is not None:
            raise InputError("--base is for a LoRA adapter folder (a text checkpoint)")
        else:
            tm = load_threat_model(checkpoint, update, allow_custom_arch=allow_custom_arch, allow_nonfinite=True,
                                   check_base=not ignore_base_mismatch)
            info, model, lines = inspect_threat_model(tm), tm.spec.arch, []
        emit_json(info, output)
        con = err_console(quiet)
        con.print(_table(info, model))
        for line in [*lines, *(f"warning: {clean(w)}" for w in info["warnings"])]:
            con.print(line)
        if bad := info["nonfinite_tensors"]:
            raise InputError(f"update {str(update)!r}: {len(bad)} tensor(s) contain NaN or Inf (first: {bad[0]!r})")
