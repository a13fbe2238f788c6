"""``auto`` as data: the facts about an update computed once (``Features``), and the ordered table of routes that
read it (``ROUTES``). ``Auto`` walks the table: the first route that applies and answers wins; a route that applies
but declines (returns None) passes the update on. Each route's reason to exist, and the measurement behind it, is in
its module's docstring (the ``why`` here names it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fedaudit.labels.auto_routes import bn_mixture, class_count, delta, evidence, rules, shown, split
from fedaudit.labels.auto_routes.calibration import SPREAD_THRESHOLD
from fedaudit.labels.auto_routes.common import Run, batch_statistics, input_independent, probe_head
from fedaudit.labels.base import LabelResult
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel

STRATEGIES = ("hybrid", "evidence", "rules", "ensemble")


@dataclass(frozen=True)
class Features:
    """What every route decides on, read once per update (no route reads the update's shape again)."""

    strategy: str  # the --strategy option
    spread: float | None  # the softmax spread of the probe images (None: no output layer)
    min_feature: float | None  # the smallest output-layer input the probe saw (shown classes need >= 0)
    batch_size: int
    multi_step: bool  # a FedAvg delta (K > 1)
    exact: bool  # iDLG's B = 1 one step, or no output layer or gradient to read: the rules' exact cases
    rules_exact: bool  # one step of a model with input-independent outputs (spread < SPREAD_THRESHOLD)
    batch_statistics: bool  # clients normalise with BatchNorm batch statistics
    input_independent: bool  # every input gets (nearly) the same softmax (spread < INPUT_INDEPENDENT)

    @classmethod
    def of(cls, tm: ThreatModel, session: Session, strategy: str) -> Features:
        spread, min_feature = probe_head(tm, session) if tm.final_layer else (None, None)
        one_step = tm.meta.local_steps == 1
        return cls(
            strategy=strategy, spread=spread, min_feature=min_feature, batch_size=tm.batch_size or 0,
            multi_step=not one_step,
            exact=(tm.batch_size == 1 and one_step) or tm.final_layer is None
            or tm.final_weight_grad is None and tm.final_bias_grad is None,
            rules_exact=one_step and spread is not None and spread < SPREAD_THRESHOLD,
            batch_statistics=batch_statistics(tm), input_independent=input_independent(spread))

    @property
    def hybrid(self) -> bool:
        return self.strategy == "hybrid"

    @property
    def fallback(self) -> str:
        """The strategy the generic routes follow: hybrid's, once its own routes declined, is the rules where they
        are exact, the ensemble on FedAvg deltas and the evidence on one-step uploads."""
        if not self.hybrid:
            return self.strategy
        return "rules" if self.rules_exact else "ensemble" if self.multi_step else "evidence"


@dataclass
class State:
    """What one route leaves for a later one, and the notes every route adds to the diagnostics."""

    notes: dict = field(default_factory=dict)
    rejected: Run | None = None  # bn-count's reading of a BN mixture that failed its checks (bn-mixture -> class-count)


RouteRun = Callable[[ThreatModel, Session, Features, State, dict], LabelResult | None]


@dataclass(frozen=True)
class Route:
    name: str
    applies: Callable[[Features], bool]
    run: RouteRun
    why: str


def _trained_one_step_or_delta(f: Features) -> bool:
    return f.hybrid and not f.rules_exact and not f.exact


def _sample_split(tm, session, f, state, opts):
    result = split.by_sample_split(tm, session, f.spread, state.notes)
    return None if result is None else shown.by_one_shown_class(tm, session, result, f.min_feature)


def _bn_mixture(tm, session, f, state, opts):
    result, state.rejected = bn_mixture.by_bn_mixture(tm, session, f.spread, state.notes, opts["bn-aux-batches"])
    return result


def _class_count(tm, session, f, state, opts):
    result = class_count.by_class_count(tm, session, f.spread, state.rejected)
    return None if result is None else shown.by_shown_classes(tm, session, f.spread, result, min_feature=f.min_feature)


def _evidence(tm, session, f, state, opts):
    result = evidence.by_evidence(tm, session, f.spread)
    if result is None or not f.hybrid:
        return result
    return shown.by_shown_classes(tm, session, f.spread, result, min_feature=f.min_feature)


ROUTES: tuple[Route, ...] = (
    Route("integrality", lambda f: f.hybrid and f.rules_exact and f.batch_size > 1,
          lambda tm, s, f, st, o: rules.by_integrality(tm, s, f.spread),
          "random-init one-step uploads: bias-count, or ZLG/iLRG where clearly more integral (rules.py)"),
    Route("hidden-split", _trained_one_step_or_delta,
          lambda tm, s, f, st, o: split.by_hidden_split(tm, s, f.spread, st.notes),
          "a hidden linear layer wider than the batch splits the update into its samples (split.py)"),
    Route("sample-split", _trained_one_step_or_delta, _sample_split,
          "B < C: the output layer splits into one feature and label per sample (split.py)"),
    Route("bn-mixture", lambda f: _trained_one_step_or_delta(f) and f.multi_step and f.batch_statistics
          and not f.input_independent, _bn_mixture,
          "a FedAvg delta's BN buffers: bn-count's reading of the K batches' mixture (bn_mixture.py)"),
    Route("class-count", _trained_one_step_or_delta, _class_count,
          "the number of negative output-bias entries: few classes, many, one (class_count.py)"),
    Route("client-fit", lambda f: f.hybrid and f.multi_step and not f.batch_statistics and not f.exact,
          lambda tm, s, f, st, o: delta.by_client_fit(tm, s, f.spread),
          "FedAvg deltas without batch-statistics BN: the simulated client's step mixes (delta.py)"),
    Route("rlu-input-independent", lambda f: f.hybrid and f.multi_step and f.batch_statistics
          and f.input_independent and not f.exact,
          lambda tm, s, f, st, o: delta.by_rlu_input_independent(tm, s, f.spread),
          "input-independent outputs with BN: RLU's output-layer model is exact (delta.py)"),
    Route("ensemble", lambda f: f.fallback == "ensemble" and not f.exact,
          lambda tm, s, f, st, o: delta.by_ensemble(tm, s, f.spread),
          "other FedAvg deltas: the mean of the count methods' vectors (delta.py)"),
    Route("evidence", lambda f: f.fallback in ("evidence", "ensemble") and not f.exact, _evidence,
          "one-step uploads (and an ensemble of fewer than two): the counts that best explain the output layer "
          "(evidence.py)"),
    Route("rules", lambda f: True, lambda tm, s, f, st, o: rules.by_rules(tm, s, f.spread),
          "the fixed preference by regime, and the exact cases (rules.py)"),
)


def choose(tm: ThreatModel, session: Session, f: Features, state: State, opts: dict) -> tuple[LabelResult, str] | None:
    """The first route that applies and answers, with its name; None when none does."""
    for route in ROUTES:
        if route.applies(f):
            result = route.run(tm, session, f, state, opts)
            if result is not None:
                return result, route.name
    return None
