"""Yin et al. 2021 (GradInversion, "GI"): labels of a batch with distinct labels.

Rank the classes by min_m G[i, m] (a present class has a strongly negative entry, an absent one none,
for non-negative features) and take the B lowest. Assumes non-repeating labels, so at most min(B, C) classes.
"""

from __future__ import annotations

import torch

from fedaudit.labels.base import LabelMethod, LabelResult, samples_in_update, set_result
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.requirements import BATCH_SIZE, FINAL_WEIGHT_GRAD
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


@LABEL_METHODS.register
class Yin(LabelMethod):
    name = "yin"
    summary = "the B classes with the most negative output-weight-gradient entry (distinct labels only)"
    paper = "Yin et al. 2021, GradInversion"
    requires = (FINAL_WEIGHT_GRAD, BATCH_SIZE)
    counts_capable = False

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        score = tm.output_grad("weight").double().flatten(1).min(dim=1).values
        b = samples_in_update(tm)
        k = min(b, tm.spec.num_classes)
        present = torch.argsort(score, stable=True)[:k]
        result = set_result(present, tm.spec.num_classes, scores=score.tolist())
        if b > tm.spec.num_classes:
            result.warnings.append(f"yin assumes distinct labels; B={b} > C={tm.spec.num_classes}, so duplicates are missed")
        return result
