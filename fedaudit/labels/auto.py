"""``auto``: the best label method the update supports, and which one it chose (and why).

Rules, from benchmarks/labels.py (README table):
* A batch of one (one step): iDLG, which is exact.
* Output layer withheld: GDBR.
* Otherwise the choice depends on whether the model's softmax depends on its input. fedaudit measures the
  *spread*, the mean total-variation distance between each aux (or dummy) sample's softmax and their mean.
  - Spread < 0.3 (outputs nearly input-independent, e.g. early training): bias-count, then ZLG, then iLRG.
    These are exact up to that spread; random-init models measured <= 0.21.
  - Otherwise (trained-like; measured >= 0.35): LLG, then HFGI. These use the gradient alone and degrade
    least on trained models.
Methods that take auxiliary data use ``--aux`` when given, Gaussian dummies otherwise.
"""

from __future__ import annotations

from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelMethod, LabelResult
from fedaudit.labels.features import head_stats
from fedaudit.session import Aux, Session
from fedaudit.threat_model import ThreatModel

DUMMIES = 500
SPREAD_THRESHOLD = 0.3
UNTRAINED = ("bias-count", "zlg", "ilrg", "llg", "hfgi", "fedleak", "gdbr")
TRAINED = ("llg", "hfgi", "zlg", "bias-count", "ilrg", "fedleak", "gdbr")


def softmax_spread(tm: ThreatModel, session: Session) -> float:
    aux = session.aux if session.aux is not None else Aux.dummies(tm.spec, DUMMIES, session.seed)
    _, p = head_stats(tm, aux.images, normalized=aux.normalized)
    return float(0.5 * (p - p.mean(0)).abs().sum(1).mean())


def _candidates(tm: ThreatModel, session: Session, spread: float | None):
    """(name, method class, session) in order of preference; methods that take aux data get dummies when the
    session has none."""
    single = tm.batch_size == 1 and tm.meta.local_steps == 1
    order: tuple[str, ...] = ("idlg",) if single else ()
    order += UNTRAINED if spread is None or spread < SPREAD_THRESHOLD else TRAINED
    for name in order:
        method = LABEL_METHODS.get(name)
        use_dummies = session.aux is None and method.aux == "optional"
        yield name, method, session.replace(aux=Aux.dummies(tm.spec, DUMMIES, session.seed)) if use_dummies else session


@LABEL_METHODS.register
class Auto(LabelMethod):
    name = "auto"
    summary = "the best method applicable to this update (says which it chose and why)"
    paper = "see docs/results/labels.md"

    @classmethod
    def why_not(cls, tm: ThreatModel, session: Session | None = None) -> list[str]:
        session = session or Session()
        reasons = []
        for name, method, sub in _candidates(tm, session, None):
            why = method.why_not(tm, sub)
            if not why:
                return []
            reasons.append(f"{name}: {'; '.join(why)}")
        return ["no label method applies (" + " | ".join(reasons) + ")"]

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        spread = softmax_spread(tm, session) if tm.final_layer else None
        for name, method, sub in _candidates(tm, session, spread):
            if not method.why_not(tm, sub):
                chosen = method()
                result = chosen.run(tm, sub)
                regime = "input-independent outputs" if spread is not None and spread < SPREAD_THRESHOLD else "trained-like outputs"
                result.diagnostics = {"chosen": name, "softmax_spread": spread, "regime": regime,
                                      "chosen_options": chosen.opts, "aux": sub.aux.kind if sub.aux else None,
                                      **result.diagnostics}
                return result
        self.check_applicable(tm, session)
        raise AssertionError("unreachable")
