"""``fedaudit labels <method>``: one subcommand per registered label method, built from its declared options."""

from __future__ import annotations

from rich.table import Table

from fedaudit.catalog import family
from fedaudit.cli.console import check_output_file, emit_json, err_console
from fedaudit.cli.shared import aux_source, params, session_from
from fedaudit.cli.subcommands import method_subcommands

COMMON = params("checkpoint", "update", "aux", "aux_labels", "dummy", "num_dummy", "resize", "batch_size", "truth", "truth_mismatch",
                "self_check", "seed", "device", "output", "force", "quiet", "progress", "allow_custom_arch", "ignore_base_mismatch")


def _table(out: dict) -> Table:
    truth = out.get("truth_counts")
    t = Table("class", "estimate", "count", *(["truth"] if truth else []), title=f"labels: {out['method']}"
              + (f" -> {out['diagnostics']['chosen']}" if "chosen" in out["diagnostics"] else ""))
    for c, (f, n) in enumerate(zip(out["counts"], out["counts_int"])):
        if n or f > 0.05 or (truth and truth[c]):
            t.add_row(str(c), f"{f:.3f}", str(n), *([str(truth[c])] if truth else []))
    if "metrics" in out:
        m = out["metrics"]
        t.caption = "  ".join(f"{k} {m[k]:.3f}" for k in ("InsAcc", "ClsAcc", "LnAcc", "LeAcc"))
        if "floor" in m:  # an even guess's InsAcc: a reading at or below it shows nothing of the batch
            t.caption += f"\nInsAcc floor (an even guess, no update read) {m['floor']['InsAcc']:.3f}"
    return t


def _labels(cls, options: dict, kw: dict) -> None:
    from fedaudit.io.truth import load_truth
    from fedaudit.jobs import LabelJob
    from fedaudit.report.label_lines import summary_line
    from fedaudit.report.types import LabelsResult, build

    check_output_file(kw["output"], kw["force"])
    session = session_from(kw)
    tm = session.load_threat_model(kw["checkpoint"], kw["update"], aux_source(kw))
    truth = load_truth(kw["truth"]) if kw["truth"] else None
    out = LabelJob(session, tm, cls.name, options, self_check=kw["self_check"],
                   truth_mismatch=kw["truth_mismatch"].value).run(truth)
    emit_json(build(LabelsResult, out), kw["output"])
    con = err_console(kw["quiet"])
    con.print(_table(out))
    ev = out.get("evidence") or {}
    if ev.get("agreement") is not None:
        con.print(f"labels determined: {ev['determined']} (agreement {ev['agreement']:.2f} with "
                  f"{ev['methods_compared']} other methods)")
    line = summary_line(ev.get("self_check"), reason=False)  # the near-guess reason is among the warnings below
    if line:
        con.print(line)
    for w in out["warnings"]:
        con.print(f"warning: {w}")


def register(app) -> None:
    method_subcommands(app, "labels", "Recover the batch's labels from the update (one method per subcommand).",
                       family("labels"), lambda info: COMMON, _labels)
