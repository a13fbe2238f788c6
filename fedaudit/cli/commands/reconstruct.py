"""``fedaudit reconstruct <attack>``: one subcommand per registered attack, built from its declared options."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from fedaudit.catalog import MethodInfo, family
from fedaudit.cli.console import emit_json, info_line
from fedaudit.cli.errors import fail_exit
from fedaudit.cli.shared import P, aux_source, emit_result, flag, params, session_from
from fedaudit.cli.subcommands import method_subcommands
from fedaudit.errors import EXIT_INTERRUPTED

_OWN = {p.name: p for p in [
    flag("out", Path, "Report folder to create.", "--out", "-o"),
    flag("labels", Optional[str], "Label method (see 'fedaudit labels'); default: auto (hfgi for the hfgi attack).", default=None),
    flag("labels_file", Optional[Path], "Labels from 'fedaudit labels -o FILE' (JSON) or a safetensors 'labels' tensor.", default=None),
    flag("truth", Optional[Path], "Ground truth (images and labels): adds PSNR/SSIM/LPIPS, the risk band and label accuracy to the report.",
         "--truth", "-t", default=None),
    flag("multi_step", str, "For K-step deltas: merged (one batch of B*K, FedLeak) or unroll (simulate K SGD steps).", default="merged"),
    flag("checkpoint_every", int, "Write a resumable checkpoint every N iterations.", default=0),
    flag("checkpoint_file", Optional[Path], "Where to write checkpoints (default: OUT.checkpoint.safetensors).", default=None),
    flag("resume", Optional[Path], "Continue from a checkpoint of the same run.", default=None),
]}
_FLAGS = {"iterations": ("--iterations", "-n")}


def _loop_params(defaults: dict) -> list[P]:
    """--iterations/--restarts/--lr/--schedule, with this attack's defaults in the help text."""
    return [P(o.name.replace("-", "_"), P.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[o.type], typer.Option(
        *_FLAGS.get(o.name, (f"--{o.name}",)), help=f"{o.help} This attack's default: {defaults[o.name]}.")])
        for o in family("attacks").loop_options]


def _params(info: MethodInfo) -> list[P]:
    return (params("checkpoint", "update", _OWN["out"], _OWN["labels"], _OWN["labels_file"], "aux", "aux_labels", "dummy",
                   "num_dummy", "resize", "batch_size", _OWN["truth"], "truth_mismatch", "self_check", "proxies")
            + _loop_params(info.defaults)
            + params(_OWN["multi_step"], _OWN["checkpoint_every"], _OWN["checkpoint_file"], _OWN["resume"], "fail_on", "gate",
                     "format", "lpips_net", "lpips_weights", "seed", "device", "force", "quiet", "progress", "allow_custom_arch",
                     "ignore_base_mismatch"))


def check_checkpoint_file(path: Path, inputs: list) -> None:
    """``--checkpoint-file`` is fedaudit's own: a finished run deletes it, so it must not be an input of this run nor
    any existing file fedaudit did not write (issue 88: a user's notes.txt was overwritten, then deleted, and naming
    the update being audited deleted it)."""
    from fedaudit.errors import InputError
    from fedaudit.io.files import read_safetensors

    target = path.resolve()
    for given in inputs:
        if given is not None and Path(given).resolve() == target:
            raise InputError(f"--checkpoint-file {str(path)!r} is one of this run's inputs; a finished run deletes its "
                             "checkpoint file: name a new file")
    if path.exists() or path.is_symlink():
        try:
            _, meta = read_safetensors(path, "checkpoint file")
        except InputError:
            meta = {}
        if meta.get("fedaudit.file") != "attack_checkpoint":
            raise InputError(f"--checkpoint-file {str(path)!r} exists and is not an attack checkpoint fedaudit wrote; "
                             "a finished run would delete it: name a new file")


def _reconstruct(cls, options: dict, kw: dict) -> None:
    from fedaudit.attacks.base import LOOP_OPTIONS
    from fedaudit.io.truth import check_truth, load_truth
    from fedaudit.jobs import ReconstructJob
    from fedaudit.jobs.reconstruct import check_counts
    from fedaudit.report.outdir import OutputDir

    name = cls.name
    loop = {o.name: kw[o.name.replace("-", "_")] for o in LOOP_OPTIONS}
    cls.loop_settings(loop)  # bad loop settings are refused before anything is read
    check_counts(kw["proxies"], kw["checkpoint_every"])  # before anything is read
    checkpoint_file = kw["checkpoint_file"] or Path(f"{kw['out']}.checkpoint.safetensors")
    if kw["checkpoint_every"]:
        check_checkpoint_file(checkpoint_file, [kw[k] for k in ("checkpoint", "update", "truth", "labels_file")])
    session = session_from(kw)
    outdir = OutputDir(kw["out"], force=session.force)
    with outdir:
        tm = session.load_threat_model(kw["checkpoint"], kw["update"], aux_source(kw))
        truth = load_truth(kw["truth"]) if kw["truth"] else None
        if truth is not None:  # another update's truth is refused before any work (the job records a warning)
            check_truth(truth, tm.update.sha256, kw["truth_mismatch"].value)
        info_line(f"{name}: {tm.spec.arch}, {tm.meta.kind}, B={tm.batch_size}, K={tm.meta.local_steps}, "
                  f"device {session.device}", session.quiet)
        job = ReconstructJob(session, tm, name, options, loop, labels=kw["labels"], labels_file=kw["labels_file"],
                             label_self_check=kw["self_check"],
                             multi_step=kw["multi_step"], checkpoint_every=kw["checkpoint_every"],
                             checkpoint_path=checkpoint_file,
                             resume=kw["resume"], proxies=kw["proxies"], gate=kw["gate"].value,
                             truth_mismatch=kw["truth_mismatch"].value)
        inputs = {"checkpoint": kw["checkpoint"], "update": kw["update"], "truth": kw["truth"],
                  "labels_file": kw["labels_file"], "resume": kw["resume"]}
        result = job.run_to(outdir, truth, inputs)
    if not result.interrupted and kw["checkpoint_every"] and job.checkpoint_path is not None:
        # a finished run needs no resume point, and the checkpoint holds reconstructed images: do not leave it
        job.checkpoint_path.unlink(missing_ok=True)
    for line in result.notes(kw["out"]):
        info_line(line, session.quiet)
    gate = result.report.fail_on_band
    emit_result(kw, "reconstruct", result.summary(kw["out"]), gate.band if gate is not None else None)
    if result.interrupted:
        info_line("interrupted: the best reconstruction so far and a partial report were written", session.quiet)
        raise typer.Exit(EXIT_INTERRUPTED)
    # measured with --truth, else estimated, at the --gate end (its line says)
    _gate_exit(result.report.fail_on_band, kw["fail_on"].value, session.quiet)


def _gate_exit(gate, fail_on: str, quiet: bool) -> None:
    """Exit 1 where the band ``--fail-on`` reads (a report's ``fail_on_band``) reaches it (image and text runs)."""
    if gate is not None and gate.band:
        fail_exit(gate.band, fail_on, quiet, f"{gate.source_kind}, {gate.gate} end")


_TEXT_OUT = flag("out", Path, "Report folder to create (report.json, report.html, recovered.txt).", "--out", "-o")
_TEXT_TRUTH = flag("truth", Optional[Path], "Ground truth of a text capture ('fedaudit capture ... --truth-out'): adds token "
                   "accuracy, ROUGE and the measured band.", "--truth", "-t", default=None)


def _text_params(info: MethodInfo) -> list[P]:
    return params("checkpoint", "update", "base", _TEXT_OUT, "batch_size", _TEXT_TRUTH, "truth_mismatch", "fail_on",
                  "gate", "seed", "device", "force", "quiet", "ignore_base_mismatch")


def _reconstruct_text(cls, options: dict, kw: dict) -> None:
    """A text attack on a language-model folder (docs/text.md)."""
    from fedaudit.errors import InputError
    from fedaudit.io.hf_folder import is_text_checkpoint
    from fedaudit.jobs.text_reconstruct import TextReconstructJob, text_summary
    from fedaudit.report.outdir import OutputDir

    if not is_text_checkpoint(kw["checkpoint"]):
        raise InputError(f"{cls.name} attacks language models: {str(kw['checkpoint'])!r} is not a Hugging Face model "
                         "folder (config.json, model.safetensors, tokenizer.json)")
    session = session_from(kw)
    outdir = OutputDir(kw["out"], force=session.force)
    with outdir:
        job = TextReconstructJob(session, kw["checkpoint"], kw["update"], cls.name, options, gate=kw["gate"].value,
                                 truth_mismatch=kw["truth_mismatch"].value, base=kw["base"])
        report = job.run_to(outdir, kw["truth"])
    info_line(f"{cls.name}: {len(report.sequences)} sequences recovered, {report.certified} passed every exact check "
              f"(on {session.device}) -> {kw['out']}", session.quiet)
    if report.fail_on_band is not None and report.fail_on_band.line:
        info_line(report.fail_on_band.line, session.quiet)
    emit_json(text_summary(report, kw["out"]))
    _gate_exit(report.fail_on_band, kw["fail_on"].value, session.quiet)


def register(app) -> None:
    method_subcommands(app, "reconstruct", "Reconstruct the client's data from the update (one attack per subcommand: "
                       "images, or text on a language-model folder).",
                       family("attacks"), _params, _reconstruct, more=((family("text_attacks"), _text_params, _reconstruct_text),))
