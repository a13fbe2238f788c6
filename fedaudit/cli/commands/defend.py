"""``fedaudit defend <defense> CKPT UPDATE -o defended.safetensors``: one subcommand per registered defense.

The checkpoint is needed as everywhere else: to convert a delta/weights update to a gradient, to check the base
hash, and for the defenses that recompute the gradient from the client's batch (``--batch``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from fedaudit.catalog import family
from fedaudit.cli.console import emit_json, info_line, refuse_existing
from fedaudit.cli.shared import flag, params, session_from
from fedaudit.cli.subcommands import method_subcommands

COMMON = params(
    "checkpoint", "update",
    flag("out", Path, "Defended update to write (.safetensors).", "--output", "-o"),
    flag("batch", Optional[Path], "The client's batch (a truth file: images, labels) for defenses that recompute the "
         "gradient; --truth is the same flag, as in the other commands.", "--batch", "--truth", default=None),
    "seed", "device", "force", "quiet", "allow_custom_arch", "ignore_base_mismatch",
)


def _defend(cls, options: dict, kw: dict) -> None:
    from fedaudit.io.truth import load_truth
    from fedaudit.jobs import DefendJob

    refuse_existing(kw["out"], kw["force"])
    session = session_from(kw)
    tm = session.load_threat_model(kw["checkpoint"], kw["update"])
    job = DefendJob(session, tm, [(cls.name, options)], load_truth(kw["batch"]) if kw["batch"] else None)
    result = job.run()
    job.write(kw["out"], result)
    doc = job.summary(kw["out"], result)
    info_line(f"{cls.name}: relative gradient change {doc['relative_gradient_error']:.4g} -> {kw['out']}", session.quiet)
    emit_json(doc)


def register(app) -> None:
    method_subcommands(app, "defend", "Apply a defense to a recorded update (one defense per subcommand; chain by re-running).",
                       family("defenses"), lambda info: COMMON, _defend)
