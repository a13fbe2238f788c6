"""Which help panel each shared flag shows in (``--help`` groups them; a method's own options come first)."""

from __future__ import annotations

import inspect as pyinspect
import typing

PANELS = {
    "Labels": ("labels", "labels_file", "aux", "aux_labels", "dummy", "num_dummy", "resize", "self_check"),
    "Optimisation": ("iterations", "restarts", "lr", "schedule", "restart_batch", "cuda_graph", "multi_step",
                     "checkpoint_every", "checkpoint_file", "resume", "seed"),
    "Verdict": ("truth", "truth_mismatch", "proxies", "fail_on", "gate", "lpips_net", "lpips_weights"),
    "Output": ("out", "output", "force", "quiet", "progress"),
    "Inputs and device": ("batch_size", "device", "allow_custom_arch", "ignore_base_mismatch"),
}
ORDER = {name: i for i, name in enumerate(PANELS)}
PANEL_OF = {param: panel for panel, names in PANELS.items() for param in names}


def with_panel(param: pyinspect.Parameter, panel: str | None) -> pyinspect.Parameter:
    """``param`` shown in ``panel`` (its Typer option's ``rich_help_panel``); arguments and unannotated ones as they are."""
    if panel is None or typing.get_origin(param.annotation) is not typing.Annotated:
        return param
    for info in typing.get_args(param.annotation)[1:]:
        if hasattr(info, "rich_help_panel") and type(info).__name__ == "OptionInfo":
            info.rich_help_panel = panel
    return param


def grouped(shared: list[pyinspect.Parameter], own: list[pyinspect.Parameter], own_panel: str) -> list[pyinspect.Parameter]:
    """The positional arguments, then the method's own options (panel ``own_panel``), then the shared flags panel by
    panel in ``PANELS``' order (a flag in no panel last)."""
    positional = [p for p in shared if p.kind is not p.KEYWORD_ONLY]
    keyword = [p for p in shared if p.kind is p.KEYWORD_ONLY]
    keyword.sort(key=lambda p: ORDER.get(PANEL_OF.get(p.name, ""), len(ORDER)))
    return (positional + [with_panel(p, own_panel) for p in own]
            + [with_panel(p, PANEL_OF.get(p.name)) for p in keyword])
