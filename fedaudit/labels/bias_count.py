"""Counts from the output layer's bias gradient: lambda = B * (p~ - gb) (shared/specs/gdbr.md section 3).

gb = mean_n (p_n - y_n) exactly, so the only approximation is p~, the mean softmax estimated on auxiliary
images or Gaussian dummies in place of the batch's own mean softmax. The simplest reference for any
count method; needs the bias gradient (bias removal defeats it).
"""

from __future__ import annotations

from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelContext, LabelMethod, LabelResult, integer_counts, samples_in_update
from fedaudit.labels.features import aux_stats
from fedaudit.requirements import BATCH_SIZE, FINAL_BIAS_GRAD
from fedaudit.threat_model import ThreatModel


@LABEL_METHODS.register("bias-count")
class BiasCount(LabelMethod):
    name = "bias-count"
    summary = "B * (mean aux softmax - output bias gradient)"
    paper = "derived (see shared/specs/gdbr.md section 3)"
    requires = (FINAL_BIAS_GRAD, BATCH_SIZE)
    aux = "optional"

    def run(self, tm: ThreatModel, ctx: LabelContext) -> LabelResult:
        _, p = aux_stats(tm, ctx)
        b = samples_in_update(tm, ctx)
        gb = tm.final_bias_grad.double()
        raw = b * (p.mean(0) - gb)
        return LabelResult(raw, integer_counts(raw, b), {"aux": ctx.aux.kind, "sum_bias_grad": float(gb.sum())})
