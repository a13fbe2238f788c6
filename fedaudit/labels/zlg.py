"""ZLG (Geng et al. 2021, "Towards general deep leakage in FL"): counts from row sums and aux statistics.

lambda_i = B * p_i - B * g_i / O, with p the mean softmax and O = mean_n sum_m h_nm the mean feature sum
into the output layer, both over auxiliary images or Gaussian dummies. Exact when every sample has the same
p and feature sum (untrained model, ReLU/sigmoid features); degrades as samples differ.
"""

from __future__ import annotations

from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts, samples_in_update
from fedaudit.labels.features import aux_stats, output_weight_grad_rowsums
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.requirements import BATCH_SIZE, FINAL_WEIGHT_GRAD
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


@LABEL_METHODS.register
class ZLG(LabelMethod):
    name = "zlg"
    rules_rank = (1, 2)
    ensemble_rank = 1
    summary = "counts from row sums, the aux mean softmax and the aux mean feature sum"
    paper = "Geng et al. 2021, ZLG"
    requires = (FINAL_WEIGHT_GRAD, BATCH_SIZE)
    aux = "optional"

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        aux = self.aux_of(session)
        h, p = aux_stats(tm, aux)
        b = samples_in_update(tm)
        o = float(h.sum(1).mean())
        raw = b * p.mean(0) - b * output_weight_grad_rowsums(tm) / o
        return LabelResult(raw, integer_counts(raw, b), {"mean_feature_sum": o, "aux": aux.kind})
