"""iLRG (Ma et al., ICLR 2023): instance-level label restoration from the output layer's weight and bias gradients.

1. Class-mean embeddings e_i = G[i, :] / gb_i (a gb-weighted mean of the batch's features).
2. The probabilities a sample with that embedding gets: P[i, :] = softmax(W e_i + b).
3. Solve, least squares (pinv), sum_j k_j = B and for each class i: sum_j k_j (P[j, i] - delta_ij) = B * gb_i.
4. Clip negatives to 0, zero out counts that round above B (as the reference code does), project to integers
   summing to B (fedaudit.labels.base.integer_counts; the reference code rounds and never fixes the sum).
The division is guarded: |gb_i| below 1e-30 is replaced by 1e-30 with its sign.
"""

from __future__ import annotations

import torch

from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts, samples_in_update
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.requirements import BATCH_SIZE, FINAL_BIAS_GRAD, FINAL_WEIGHT_GRAD
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel

TINY = 1e-30


@LABEL_METHODS.register
class ILRG(LabelMethod):
    name = "ilrg"
    rules_rank = (2, 4)
    ensemble_rank = 2
    summary = "solve a linear system on class-mean embeddings G/gb and their softmax (needs the output bias gradient)"
    paper = "Ma et al. 2023, iLRG"
    requires = (FINAL_WEIGHT_GRAD, FINAL_BIAS_GRAD, BATCH_SIZE)

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        b = samples_in_update(tm)
        head = dict(tm.model.named_modules())[tm.final_layer]
        w, bias = head.weight.detach().double().cpu(), head.bias.detach().double().cpu()
        g = tm.output_grad("weight").double().cpu()
        gb = tm.output_grad("bias").double().cpu()
        safe = torch.where(gb.abs() < TINY, torch.where(gb < 0, -TINY, TINY), gb)
        emb = g / safe[:, None]
        probs = torch.softmax(emb @ w.T + bias, dim=1)  # [class whose embedding, output class]
        c = probs.shape[0]
        a = torch.cat([probs.T - torch.eye(c, dtype=torch.float64, device="cpu"),
                       torch.ones(1, c, dtype=torch.float64, device="cpu")])
        rhs = torch.cat([b * gb, torch.tensor([float(b)], dtype=torch.float64, device="cpu")])
        k = torch.linalg.pinv(a) @ rhs
        residual = float(torch.linalg.norm(a @ k - rhs))
        k = k.clamp_min(0)
        k[torch.round(k) > b] = 0  # the reference code rounds first: 1.0000001 at B = 1 is a valid count
        return LabelResult(k, integer_counts(k, b), {"residual": residual, "condition": float(torch.linalg.cond(a))})
