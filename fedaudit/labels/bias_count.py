"""Counts from the output layer's bias gradient: lambda = B * (p~ - gb) (docs/methods/labels.md, Derivations).

gb = mean_n (p_n - y_n) exactly, so the only approximation is p~, the mean softmax estimated on auxiliary
images or Gaussian dummies in place of the batch's own mean softmax. The simplest reference for any
count method; needs the bias gradient (bias removal defeats it).
"""

from __future__ import annotations

from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts, samples_in_update
from fedaudit.labels.features import aux_stats
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.requirements import BATCH_SIZE, FINAL_BIAS_GRAD
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


@LABEL_METHODS.register
class BiasCount(LabelMethod):
    name = "bias-count"
    rules_rank = (0, 3)
    ensemble_rank = 0
    summary = "B * (mean aux softmax - output bias gradient)"
    paper = "derived (see docs/methods/labels.md)"
    requires = (FINAL_BIAS_GRAD, BATCH_SIZE)
    aux = "optional"

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        aux = self.aux_of(session)
        _, p = aux_stats(tm, aux)
        b = samples_in_update(tm)
        gb = tm.output_grad("bias").double()
        raw = b * (p.mean(0) - gb)
        return LabelResult(raw, integer_counts(raw, b), {"aux": aux.kind, "sum_bias_grad": float(gb.sum())})
