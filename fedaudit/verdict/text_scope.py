"""What a language-model update does and does not reveal, in plain lines for the verdict (docs/text.md): which
tensors are shared (a whole model or only LoRA adapters), what DAGER's span checks can see through them (up to the
model's width, or the adapter's rank r) and what this update's gradients showed."""

from __future__ import annotations

from typing import Any

from fedaudit.attacks.text.dager import REPLAYED
from fedaudit.models.text_families import FAMILIES
from fedaudit.text_threat_model import TextThreatModel


def _short(module: str) -> str:
    return module.removeprefix("transformer.")


def _here(ranks: list[int]) -> str:
    """The ranks this run measured (DAGER's spans), or nothing where the attack measured none."""
    return f" (here {', '.join(map(str, ranks))})" if ranks else ""


def what_it_reveals(tm: TextThreatModel, diagnostics: dict[str, Any], certified: int) -> list[str]:
    ckpt, adapter = tm.checkpoint, tm.checkpoint.adapter
    ranks, bounds = diagnostics.get("ranks", []), diagnostics.get("rank_bounds", [])
    b = tm.batch_size
    lines = []
    if adapter is not None:
        r = adapter["r"]
        modules = ", ".join(_short(m) for m in adapter["target_modules"])
        lines.append(f"LoRA-only update: rank-{r} adapters (scaling {adapter['scaling']:g}) on {modules}. Not shared: "
                     "the base model's weights, its embeddings and every frozen layer's gradient.")
        most = bounds[0] if bounds else r  # r, or r on each adapted module that takes the inputs (stacked)
        each = f"r = {r}" if most == r else f"{most} (r = {r} on each of the adapted modules that share the input)"
        visible = "each line's tokens" if ckpt.kind == "encoder" else "each line's tokens but its last"
        lines.append(f"What the adapters reveal: blocks 0 and 1's attention-input adapters show at most {each} "
                     f"directions of their layers' inputs{_here(ranks)}; DAGER recovers a batch "
                     f"exactly while it has fewer than {most} visible tokens ({visible}).")
        if diagnostics.get("rank_bound_reached"):
            m = bounds[0] if bounds else r
            lines.append(f"This batch reaches the bound (rank {m} of {m}: at least {m} visible tokens): the adapters "
                         f"carry only a rank-{m} slice of what its tokens produced, which holds none of them, so no "
                         "line can be certified; optimisation attacks (fedaudit reconstruct tag, lamp) read such "
                         "slices approximately, so this is no evidence of safety.")
    else:
        d = bounds[0] if bounds else ckpt.width
        lines.append(f"Full update: {len(tm.present)} of {len(tm.present) + len(tm.absent)} parameters shared"
                     + (", the embeddings among them." if FAMILIES[ckpt.model_type].embedding in tm.present else "."))
        lines.append(f"What it reveals: blocks 0 and 1's attention-input gradients show up to d = {d} directions of "
                     f"their inputs{_here(ranks)}; DAGER recovers a batch exactly while it has "
                     f"fewer than about {d} visible tokens.")
        if diagnostics.get("saturated"):
            lines.append("This batch reaches the width: its spans hold every candidate, so no line can be certified "
                         "(no evidence of safety: approximate attacks, tag and lamp, still apply).")
    if missing := diagnostics.get("unexplained_directions"):
        lines.append(f"Block 1's span holds {missing} direction(s) the recovered lines do not explain: some lines came "
                     "back cut short or were missed (a true token failed a check), so what is shown is part of the "
                     "batch, not all of it.")
    if tm.meta.local_steps > 1 and tm.local is not None:
        lines.append(_delta_line(tm, diagnostics))
    if diagnostics.get("certifies") is False:
        lines.append("This attack is approximate and its recovered lines do not reproduce the update, so it certifies "
                     "none; its words are read against the truth (--truth) or by eye. DAGER's exact checks, where "
                     "they apply, certify what they recover.")
    if certified:
        held = f" of the round's {tm.lines}" if tm.meta.local_steps > 1 and tm.lines else f" of B = {b}" if b else ""
        lines.append(f"Here {certified} line(s){held} passed every exact check: the update reveals them word for word.")
    return lines


def _delta_line(tm: TextThreatModel, diagnostics: dict[str, Any]) -> str:
    """A FedAvg delta: what its rows hold, how DAGER reads them, and what the replay and the round-off showed."""
    local = tm.local
    assert local is not None
    line = (f"FedAvg delta of {local.steps} local SGD steps (lr {local.lr:g}): its rows hold every step's inputs, each "
            "at that step's weights; DAGER searches the steps one by one at weights replayed from the lines it "
            "recovered, and certifies them only where replaying the round on them reproduces the delta.")
    residual = diagnostics.get("replay_residual")
    if residual is not None:
        line += (f" Replaying the recovered round reproduces the delta (relative residual {residual:.0e})."
                 if residual < REPLAYED else
                 f" The replayed round is {residual:.2g} (relative) from the delta: not every step's lines were found, "
                 "so none is certified.")
    floor = max((r for r in diagnostics.get("round_off") or [] if r is not None), default=None)
    if floor is not None and floor > FADING:
        line += (f" The change stands only {1 / floor:.0f}x above its float round-off: at learning rates this small "
                 "the steps' directions fade into it and the checks lose lines (no evidence of safety).")
    return line


FADING = 1e-4  # a round-off estimate above this share of the change's top singular value: lines fade (docs/text.md)
