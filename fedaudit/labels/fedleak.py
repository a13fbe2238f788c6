"""FedLeak's label inference (Section 5): Yin's rule, plus a count rule when the batch exceeds the classes.

s_j = sum_m G[j, m] (the paper writes dW as K x N, features x classes; PyTorch stores N x K).
* B <= C: the B classes with the lowest s_j (distinct labels).
* B > C:  c_j = floor(B * sum_m (G[j,m] - maxW) / sum_{j,m} (G[j,m] - maxW)); while sum c_j < B, add a sample
  to "the class with the lowest gradient strength".

The paper leaves two choices open (docs/methods/labels.md), exposed as options:
* ``--max-ref grad`` (default): maxW is the largest entry of the gradient G, so every shifted term is <= 0
  and the ratio is a proper share; ``weight`` takes the paper's symbol literally (largest entry of W).
* ``--fill lowest`` (default): every missing sample goes to the class with the lowest s_j, the literal reading;
  ``remainder`` gives them to the largest fractional parts of B * share instead.
"""

from __future__ import annotations

import torch

from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts, samples_in_update, set_result
from fedaudit.labels.features import output_weight_grad_rowsums
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.requirements import BATCH_SIZE, FINAL_WEIGHT_GRAD
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


@LABEL_METHODS.register
class FedLeakLabels(LabelMethod):
    name = "fedleak"
    rules_rank = (5, 5)
    multi_step_aware = True
    summary = "Yin's lowest row sums for B <= C; FedLeak's share-of-gradient count rule for B > C"
    paper = "FedLeak (Section 5, Appendix F)"
    requires = (FINAL_WEIGHT_GRAD, BATCH_SIZE)
    options = (
        MethodOption("max-ref", str, "grad", "what 'max W' is: the gradient's largest entry, or the weight's", ("grad", "weight")),
        MethodOption("fill", str, "lowest", "where missing samples go: the lowest row sum, or the largest remainders", ("lowest", "remainder")),
    )

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        b, c = samples_in_update(tm), tm.spec.num_classes
        g = tm.output_grad("weight").double().flatten(1).cpu()
        s = output_weight_grad_rowsums(tm).cpu()
        if b <= c:
            result = set_result(torch.argsort(s, stable=True)[:b], c, branch="argmin", row_sums=s.tolist())
            return result
        head = dict(tm.model.named_modules())[tm.final_layer]
        ref = float(g.max()) if self.opt("max-ref") == "grad" else float(head.weight.detach().max())
        shifted = (g - ref).sum(1)
        share = b * shifted / shifted.sum()
        if self.opt("fill") == "remainder":
            counts = integer_counts(share, b)
        else:
            counts = torch.floor(share).clamp_min(0).long()
            counts[torch.argmin(s)] += b - int(counts.sum())
        return LabelResult(share, counts, {"branch": "count", "max_ref": ref, "row_sums": s.tolist()})
