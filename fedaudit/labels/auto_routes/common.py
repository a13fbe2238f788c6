"""What ``auto``'s routes share: the head probe, running candidate methods, and the diagnostics of a routed result."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from fedaudit.errors import NotApplicable
from fedaudit.labels import presence
from fedaudit.labels.auto_routes.calibration import INPUT_INDEPENDENT, SPREAD_THRESHOLD
from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts
from fedaudit.labels.features import head_stats
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.session import Aux, Session
from fedaudit.threat_model import ThreatModel

DUMMIES = 500

Run = tuple  # (name, LabelResult, the session it ran with, seconds), as run_each gives it


def ranked(rank: Callable[[type[LabelMethod]], int | None]) -> tuple[str, ...]:
    """The registered methods that ``rank`` places (not None), in its order: the rules' preferences and the ensemble's
    members are attributes of the methods (``rules_rank``, ``ensemble_rank``), read here when a route runs."""
    placed = [(r, name) for name, method in LABEL_METHODS if (r := rank(method)) is not None]
    return tuple(name for _, name in sorted(placed))


def rules_order(trained: bool) -> tuple[str, ...]:
    """The rules' order of preference at random init (``trained`` False) or on a trained-like model."""
    return ranked(lambda m: m.rules_rank[1 if trained else 0])


def probe_aux(tm: ThreatModel, session: Session) -> Aux:
    """The images the head is probed with: the session's aux data, else Gaussian dummies."""
    return session.aux if session.aux is not None else Aux.dummies(tm.spec, DUMMIES, session.seed)


def probe_head(tm: ThreatModel, session: Session) -> tuple[float, float]:
    """(softmax spread, smallest feature into the output layer) of the aux images (or dummies): one forward serves
    the regime and the shown-classes test's sign check (presence.why_not)."""
    aux = probe_aux(tm, session)
    h, p = head_stats(tm, aux.images, normalized=aux.normalized)
    return float(0.5 * (p - p.mean(0)).abs().sum(1).mean()), float(h.min())


def read_shown(tm: ThreatModel, session: Session, min_feature: float | None
               ) -> tuple[list[str], torch.Tensor | None, torch.Tensor | None]:
    """(why the shown-classes test cannot be read, shown [C], row minima [C]) of presence.py; the probe images run
    only where ``min_feature`` (from probe_head) is not already known."""
    probe = probe_aux(tm, session) if min_feature is None else None
    why = presence.why_not(tm, probe, min_feature)
    if why:
        return why, None, None
    classes, minima = presence.shown_classes(tm)
    return why, classes, minima


def parameters(tm: ThreatModel) -> int:
    """The model's parameter count (client-fit runs only up to CLIENT_FIT_MAX_PARAMETERS, calibration.py)."""
    return sum(p.numel() for p in tm.model.parameters())


def with_aux(tm: ThreatModel, session: Session, method: type[LabelMethod]) -> Session:
    """The session a candidate runs with: Gaussian dummies for a method that takes aux data when none was given."""
    if session.aux is None and method.aux in ("optional", "labelled"):
        return session.replace(aux=probe_aux(tm, session))
    return session


def batch_statistics(tm: ThreatModel) -> bool:
    """Whether the clients normalise with BatchNorm batch statistics (train mode, and the model has BatchNorm)."""
    return tm.train_bn and tm.has_batchnorm


def input_independent(spread: float | None) -> bool:
    """Whether the model gives every input (nearly) the same softmax (spread below INPUT_INDEPENDENT): RLU's model of
    the output layer is then exact."""
    return spread is not None and spread < INPUT_INDEPENDENT


def negative_entries(tm: ThreatModel) -> int:
    """How many output-bias-gradient entries are negative (0 where the update has no bias gradient)."""
    gb = tm.final_bias_grad
    return int((gb < 0).sum()) if gb is not None else 0


def run_each(tm: ThreatModel, session: Session, names: tuple[str, ...], options: dict | None = None
             ) -> tuple[list[Run], dict[str, str]]:
    """Run every applicable method of ``names`` (``options``: {name: that method's options}): [(name, result, session
    it ran with, seconds)] and {name: why not}."""
    runs: list[Run] = []
    skipped: dict[str, str] = {}
    for name in names:
        method = LABEL_METHODS.get(name)
        sub = with_aux(tm, session, method)
        why = method.why_not(tm, sub)
        if why:
            skipped[name] = "; ".join(why)
            continue
        t0 = time.perf_counter()
        try:
            result = method((options or {}).get(name)).run(tm, sub)
        except (NotApplicable, ValueError) as exc:
            skipped[name] = str(exc)
            continue
        runs.append((name, result, sub, time.perf_counter() - t0))
    return runs, skipped


def all_in_class(counts: torch.Tensor, cls: int, sub: Session, seconds: float) -> Run:
    """A run (as ``run_each`` gives) named "one class" that puts every one of ``counts``' samples on class ``cls``."""
    one = torch.zeros_like(counts)
    one[cls] = int(counts.sum())
    return "one class", LabelResult(one.double(), one), sub, seconds


def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Total-variation distance between two count vectors' class shares."""
    a, b = a.double(), b.double()
    return 0.5 * float((a / a.sum() - b / b.sum()).abs().sum())


def ensemble_counts(vectors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean of integer count vectors (float) and its projection onto integers summing to their (common) total
    (``integer_counts``: largest fractional parts)."""
    stack = torch.stack([v.double() for v in vectors])
    mean = stack.mean(0)
    return mean, integer_counts(mean, int(round(float(stack.sum(1).mean()))))


def candidate_counts(result: LabelResult, name: str) -> list[int] | None:
    """The counts method ``name`` gave as one of ``result``'s reported candidates, or None."""
    return next((c["counts"] for c in result.diagnostics.get("candidates", []) if c.get("method") == name), None)


def candidates(tm: ThreatModel, session: Session, spread: float | None):
    """(name, method class, session) in the rules' order of preference."""
    single = tm.batch_size == 1 and tm.meta.local_steps == 1
    order: tuple[str, ...] = ("idlg",) if single else ()
    order += rules_order(trained=not (spread is None or spread < SPREAD_THRESHOLD))
    for name in order:
        method = LABEL_METHODS.get(name)
        yield name, method, with_aux(tm, session, method)


def regime(spread: float | None) -> dict:
    """The softmax spread and the regime it puts the model in, for a result's diagnostics."""
    kind = "input-independent outputs" if spread is not None and spread < SPREAD_THRESHOLD else "trained-like outputs"
    return {"softmax_spread": spread, "regime": kind}


def routed(run: Run, strategy: str, spread: float | None, negative: int, extra: dict) -> LabelResult:
    """``run``'s result with the route's diagnostics in front of the method's own."""
    name, result, sub, _ = run
    result.diagnostics = {"chosen": name, "strategy": strategy, **regime(spread),
                          "negative_bias_entries": negative, "aux": sub.aux.kind if sub.aux else None,
                          **extra, **result.diagnostics}
    return result


def ensemble_of(runs: list[Run], skipped: dict, spread: float | None) -> LabelResult | None:
    """The ensemble's result from the members' runs (``run_each``): the mean of their counts; None for fewer than
    two."""
    if len(runs) < 2:
        return None
    mean, counts = ensemble_counts([r.counts_int for _, r, _, _ in runs])
    return LabelResult(mean.float(), counts, {
        "chosen": "ensemble", "strategy": "ensemble", **regime(spread),
        "members": [n for n, _, _, _ in runs],
        "candidates": [{"method": n, "counts": r.counts_int.tolist(), "seconds": round(t, 3)} for n, r, _, t in runs],
        "not_run": skipped})
