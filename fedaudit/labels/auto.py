"""``auto``: the best label method the update supports, and which one it chose.

Preference (from benchmarks/labels.py; README table): a batch of one -> iDLG (exact); with the output bias
gradient -> iLRG; with the output weight gradient only -> ZLG, then LLG; output layer withheld -> GDBR.
Methods that take auxiliary data use ``--aux`` when given, Gaussian dummies otherwise.
"""

from __future__ import annotations

import dataclasses

from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelContext, LabelMethod, LabelResult
from fedaudit.labels.features import dummy_aux
from fedaudit.threat_model import ThreatModel

PREFERENCE = ("idlg-single", "ilrg", "zlg", "llg", "gdbr")
DUMMIES = 1000


def _candidates(tm: ThreatModel, ctx: LabelContext):
    """(name, method class, context) in order of preference, each with that method's default options."""
    for name in PREFERENCE:
        if name == "idlg-single":
            if (ctx.batch_size or tm.batch_size) != 1 or tm.meta.local_steps != 1:
                continue
            name = "idlg"
        method = LABEL_METHODS.get(name)
        aux = ctx.aux if ctx.aux is not None or method.aux != "optional" else dummy_aux(tm, DUMMIES, ctx.seed)
        options = {o.name: o.default for o in method.options}
        yield name, method, dataclasses.replace(ctx, aux=aux, options=options)


@LABEL_METHODS.register("auto")
class Auto(LabelMethod):
    name = "auto"
    summary = "the best method applicable to this update (says which it chose)"
    paper = "see the README's label-recovery benchmark"

    @classmethod
    def why_not(cls, tm: ThreatModel, ctx: LabelContext | None = None) -> list[str]:
        ctx = ctx or LabelContext()
        reasons = []
        for name, method, sub in _candidates(tm, ctx):
            why = method.why_not(tm, sub)
            if not why:
                return []
            reasons.append(f"{name}: {'; '.join(why)}")
        return ["no label method applies (" + " | ".join(reasons) + ")"]

    def run(self, tm: ThreatModel, ctx: LabelContext) -> LabelResult:
        for name, method, sub in _candidates(tm, ctx):
            if not method.why_not(tm, sub):
                result = method().run(tm, sub)
                result.diagnostics = {"chosen": name, "chosen_options": sub.options, "aux": sub.aux.kind if sub.aux else None,
                                      **result.diagnostics}
                return result
        self.check_applicable(tm, ctx)
        raise AssertionError("unreachable")
