"""One-step uploads of trained-like models read sample by sample: hidden-split (a hidden linear layer wider than the
batch) and sample-split (a batch smaller than the class count), each kept only where its own check passes."""

from __future__ import annotations

from typing import Callable

from fedaudit.labels.auto_routes.calibration import HIDDEN_MAX_BATCH, HIDDEN_MIN_RESOLVED, SPLIT_MAX_FIT
from fedaudit.labels.auto_routes.common import negative_entries, routed, run_each
from fedaudit.labels.base import LabelResult
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def by_sample_split(tm: ThreatModel, session: Session, spread: float | None, notes: dict) -> LabelResult | None:
    """A one-step upload of a batch smaller than the class count (B < C), of a model with trained-like outputs, with
    aux images: sample-split, which splits the output layer's update into its B samples (one feature and one
    label each) instead of reading per-class error masses, where the count methods lose most (trained models'
    random batches of 8: 56-81% by the routes below; docs/results/labels.md, "sample-split"). Kept where its fit
    reproduces the update to within SPLIT_MAX_FIT (its label search found a labelling that explains it); else
    None, and the routes below run (its fit and counts are reported as ``sample_split``). It goes before the
    one-class route (LLG and HFGI agreeing on one class): on batches of 8 that route read 9 of 17 7/1 batches as
    8/0 where the split was exact on 7 of them, and the split misses one sample of 3 of 12 8/0 batches
    (docs/results/labels.md, "sample-split")."""
    if tm.meta.local_steps != 1 or not 1 < (tm.batch_size or 0) < tm.spec.num_classes:
        return None
    return _split_route(tm, session, spread, notes, "sample-split", "fit", lambda fit: not fit > SPLIT_MAX_FIT)


def by_hidden_split(tm: ThreatModel, session: Session, spread: float | None, notes: dict) -> LabelResult | None:
    """A one-step upload of a model with trained-like outputs and a hidden linear layer wider than the batch (ReLU
    inputs, ReLU/Linear layers after it), with aux images: hidden-split, which verifies samples one by one in that
    layer's update (exact labels, any B up to its width), for B <= HIDDEN_MAX_BATCH. Kept where it verified at
    least HIDDEN_MIN_RESOLVED of the batch (the rest take the verified samples' class mix); else None and the
    routes below run, its counts reported as ``hidden_split`` (docs/results/labels.md, "hidden-split")."""
    b = tm.batch_size or 0
    if tm.meta.local_steps != 1 or not 2 <= b <= HIDDEN_MAX_BATCH:
        return None
    return _split_route(tm, session, spread, notes, "hidden-split", "resolved",
                        lambda resolved: resolved >= HIDDEN_MIN_RESOLVED * b)


def _split_route(tm: ThreatModel, session: Session, spread: float | None, notes: dict, method: str, key: str,
                 keep: Callable[[float], bool]) -> LabelResult | None:
    """Run a split method; its result is returned ("hybrid, <method without the dash>") where ``keep`` holds for
    its ``key`` diagnostic, else that diagnostic and its counts (hidden-split: its layer and the verified samples'
    counts too) are noted (``notes[<method>]``) and None."""
    runs, _ = run_each(tm, session, (method,))
    if not runs:
        return None
    d = runs[0][1].diagnostics
    if not keep(d[key]):
        notes[method.replace("-", "_")] = {key: d[key], "counts": runs[0][1].counts_int.tolist(), "kept": False,
                                           **{k: d[k] for k in ("layer", "exact_counts") if k in d}}
        return None
    return routed(runs[0], "hybrid, " + method.replace("-", " "), spread, negative_entries(tm), {})
