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

import dataclasses

from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelContext, LabelMethod, LabelResult
from fedaudit.labels.features import dummy_aux, head_stats
from fedaudit.threat_model import ThreatModel

DUMMIES = 500
SPREAD_THRESHOLD = 0.3
UNTRAINED = ("bias-count", "zlg", "ilrg", "llg", "hfgi", "fedleak", "gdbr")
TRAINED = ("llg", "hfgi", "zlg", "bias-count", "ilrg", "fedleak", "gdbr")


def softmax_spread(tm: ThreatModel, ctx: LabelContext) -> float:
    aux = ctx.aux if ctx.aux is not None else dummy_aux(tm, DUMMIES, ctx.seed)
    _, p = head_stats(tm, aux.images, normalized=aux.normalized)
    return float(0.5 * (p - p.mean(0)).abs().sum(1).mean())


def _candidates(tm: ThreatModel, ctx: LabelContext, spread: float | None):
    """(name, method class, context) in order of preference, each with that method's default options."""
    single = (ctx.batch_size or tm.batch_size) == 1 and tm.meta.local_steps == 1
    order = ("idlg",) if single else ()
    order += UNTRAINED if spread is None or spread < SPREAD_THRESHOLD else TRAINED
    for name in order:
        method = LABEL_METHODS.get(name)
        aux = ctx.aux if ctx.aux is not None or method.aux != "optional" else dummy_aux(tm, DUMMIES, ctx.seed)
        yield name, method, dataclasses.replace(ctx, aux=aux, options={o.name: o.default for o in method.options})


@LABEL_METHODS.register("auto")
class Auto(LabelMethod):
    name = "auto"
    summary = "the best method applicable to this update (says which it chose and why)"
    paper = "see the README's label-recovery benchmark"

    @classmethod
    def why_not(cls, tm: ThreatModel, ctx: LabelContext | None = None) -> list[str]:
        ctx = ctx or LabelContext()
        reasons = []
        for name, method, sub in _candidates(tm, ctx, None):
            why = method.why_not(tm, sub)
            if not why:
                return []
            reasons.append(f"{name}: {'; '.join(why)}")
        return ["no label method applies (" + " | ".join(reasons) + ")"]

    def run(self, tm: ThreatModel, ctx: LabelContext) -> LabelResult:
        spread = softmax_spread(tm, ctx) if tm.final_layer else None
        for name, method, sub in _candidates(tm, ctx, spread):
            if not method.why_not(tm, sub):
                result = method().run(tm, sub)
                regime = "input-independent outputs" if spread is not None and spread < SPREAD_THRESHOLD else "trained-like outputs"
                result.diagnostics = {"chosen": name, "softmax_spread": spread, "regime": regime,
                                      "chosen_options": sub.options, "aux": sub.aux.kind if sub.aux else None,
                                      **result.diagnostics}
                return result
        self.check_applicable(tm, ctx)
        raise AssertionError("unreachable")
