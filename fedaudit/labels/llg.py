"""LLG (Wainakh et al. 2022, the simple variant "v1"): counts from the output-weight-gradient row sums alone.

H1 = {i : g_i < 0} each get one sample. The impact of one sample is estimated as
m = (sum_{i in H1} g_i / B) * (1 + 1/C) (negative). Each assignment adds -m to its class's row sum; the
remaining B - |H1| samples go, one at a time, to argmin g. Guard (not in the reference code): when
|H1| > B, only the B most negative classes are kept, so the result always has B labels.
"""

from __future__ import annotations

import torch

from fedaudit.labels.base import LabelMethod, LabelResult, list_result, samples_in_update
from fedaudit.labels.features import output_weight_grad_rowsums
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.requirements import BATCH_SIZE, FINAL_WEIGHT_GRAD
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def greedy_counts(g: torch.Tensor, h1: torch.Tensor, impact: torch.Tensor | float, batch: int) -> list[int]:
    """LLG's assignment loop: one sample per class in H1, then repeatedly the argmin of the adjusted sums.
    ``impact`` (< 0) is subtracted from a class's sum each time it receives a sample (scalar or per class)."""
    g = g.clone()
    impact = torch.as_tensor(impact, dtype=g.dtype, device=g.device).expand_as(g)
    if len(h1) > batch:
        h1 = h1[torch.argsort(g[h1], stable=True)[:batch]]
    labels = []
    for i in h1.tolist():
        labels.append(i)
        g[i] -= impact[i]
    while len(labels) < batch:
        i = int(torch.argmin(g))
        labels.append(i)
        g[i] -= impact[i]
    return labels


@LABEL_METHODS.register
class LLG(LabelMethod):
    name = "llg"
    rules_rank = (3, 0)
    ensemble_rank = 3
    summary = "row-sum signs plus an impact estimated from the gradient itself; handles duplicates"
    paper = "Wainakh et al. 2022, LLG"
    requires = (FINAL_WEIGHT_GRAD, BATCH_SIZE)

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        g = output_weight_grad_rowsums(tm)
        b, c = samples_in_update(tm), tm.spec.num_classes
        h1 = torch.nonzero(g < 0).flatten()
        if len(h1) == 0:  # LLG assumes non-negative features; fall back to a magnitude-based impact
            result = list_result(greedy_counts(g, h1, -g.abs().mean() / b, b), c, impact=None)
            result.warnings.append("no class has a negative row sum; impact taken as -mean|g|/B")
            return result
        impact = float(g[h1].sum() / b * (1 + 1 / c))
        return list_result(greedy_counts(g, h1, impact, b), c, impact=impact, h1=h1.tolist())
