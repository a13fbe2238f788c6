"""Label-recovery metrics on class counts (docs/methods/labels.md, Label metrics).

* InsAcc = sum_c min(pred_c, true_c) / B  (multiset overlap; iLRG's IRec, LLG's accuracy)
* ClsAcc = |S_pred & S_true| / |S_true| with S = {c : count_c > 0}  (variant (a); variant (b) is LeAcc)
* LeAcc  = (1/C) sum_c [ (pred_c > 0) == (true_c > 0) ]  (iLRG; inflated when C >> B)
* LnAcc  = (1/C) sum_c [ pred_c == true_c ]  (iLRG)
"""

from __future__ import annotations

import torch

CLSACC_VARIANT = "(a) |S_pred & S_true| / |S_true|, S = classes with count > 0"


def counts(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    return torch.bincount(labels.long().flatten(), minlength=num_classes)


def label_metrics(pred_counts: torch.Tensor, true_counts: torch.Tensor) -> dict[str, float]:
    p, t = pred_counts.long(), true_counts.long()
    if p.shape != t.shape:
        raise ValueError("predicted and true counts cover different numbers of classes")
    batch = int(t.sum())
    s_pred, s_true = p > 0, t > 0
    return {
        "InsAcc": float(torch.minimum(p, t).sum()) / batch,
        "ClsAcc": float((s_pred & s_true).sum()) / float(s_true.sum()),
        "LeAcc": float((s_pred == s_true).float().mean()),
        "LnAcc": float((p == t).float().mean()),
    }
