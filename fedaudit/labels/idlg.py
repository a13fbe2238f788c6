"""iDLG (Zhao et al. 2020): the sign of the output layer's gradient reveals the label.

For one sample with label k, dL/dz_i = p_i - 1[i = k]: only the true class is negative. The bias gradient is
exactly dL/dz, so its sign is exact; the weight gradient's row i is (p_i - y_i) * h, whose row sum has the
sign of dL/dz_i when the features h are non-negative (ReLU/sigmoid). With B > 1 the negative classes form
the recovered *set*; counts are not recoverable (duplicates are missed).
"""

from __future__ import annotations

import torch

from fedaudit.labels.base import LabelMethod, LabelResult, set_result
from fedaudit.labels.features import output_weight_grad_rowsums
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.requirements import FINAL_LAYER_GRAD
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


@LABEL_METHODS.register
class IDLG(LabelMethod):
    name = "idlg"
    summary = "signs of the output-layer gradient; exact for a batch of one, the set of classes otherwise"
    paper = "Zhao et al. 2020, iDLG"
    requires = (FINAL_LAYER_GRAD,)
    counts_capable = False

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        gb = tm.final_bias_grad
        score, source = (gb.double(), "bias gradient") if gb is not None else (output_weight_grad_rowsums(tm), "weight-gradient row sums")
        present = torch.nonzero(score < 0).flatten()
        batch = tm.batch_size
        if batch == 1 and tm.meta.local_steps == 1:
            present = torch.argmin(score).view(1)  # exactly one negative entry in theory; argmin is robust to ties
        return set_result(present, tm.spec.num_classes, source=source, negative_classes=int((score < 0).sum()),
                          scores=score.tolist())
