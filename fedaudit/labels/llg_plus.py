"""LLG+ (Wainakh et al. 2022, "v2"): LLG with the impact and per-class offsets measured on labelled auxiliary
data passed through the current model; with ``--dummy`` it is LLG* (dummy inputs, round-robin labels).

For each class i, ``--repeats`` batches of B aux samples of class i give row sums g^(i) (computed in closed form,
g^(i)_j = mean_n (p_nj - 1[j=i]) * sum_m h_nm, which is exactly the mean-CE weight gradient's row sum).
The offset of class j is the mean of g^(i)_j over i != j (where an absent class sits); a sample of class j moves
g_j by m_j = (g^(j)_j - offset_j) / B. The victim's offsets are subtracted, then LLG's assignment loop runs with
the impact either averaged over classes times (1 + 1/C) (``--impact global``, as the reference code) or per
class (``--impact per-class``). H1 is taken before the offsets are subtracted, as in the reference code.
Float counts reported: (g_j - offset_j) / m_j.
"""

from __future__ import annotations

import torch

from fedaudit.errors import NotApplicable
from fedaudit.labels.base import LabelMethod, LabelResult, samples_in_update
from fedaudit.labels.features import head_stats, output_weight_grad_rowsums
from fedaudit.labels.llg import greedy_counts
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.requirements import BATCH_SIZE, FINAL_WEIGHT_GRAD
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def class_rowsums(tm: ThreatModel, images: torch.Tensor, cls: int, normalized: bool) -> torch.Tensor:
    h, p = head_stats(tm, images, normalized=normalized, chunk=images.shape[0])
    y = torch.zeros_like(p)
    y[:, cls] = 1
    return ((p - y) * h.sum(1, keepdim=True)).mean(0)


@LABEL_METHODS.register
class LLGPlus(LabelMethod):
    name = "llg-plus"
    ensemble_rank = 4
    summary = "LLG with impact and offsets measured on labelled aux images (LLG* with --dummy)"
    paper = "Wainakh et al. 2022, LLG+/LLG*"
    requires = (FINAL_WEIGHT_GRAD, BATCH_SIZE)
    aux = "labelled"
    options = (
        MethodOption("repeats", int, 10, "aux batches per class"),
        MethodOption("impact", str, "global", "impact per sample: global (reference code) or per-class", ("global", "per-class")),
    )

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        b, c = samples_in_update(tm), tm.spec.num_classes
        aux = self.aux_of(session)
        if aux.labels is None:
            raise NotApplicable("llg-plus: needs labelled auxiliary images (--aux-labels, or a 'labels' tensor)")
        aux_labels = aux.labels
        gen = torch.Generator().manual_seed(session.seed)
        sums = torch.zeros(c, c, dtype=torch.float64)  # sums[i] = mean row sums of class-i batches
        seen = torch.zeros(c, dtype=torch.bool)
        for i in range(c):
            pool = torch.nonzero(aux_labels == i).flatten()
            if len(pool) == 0:
                continue
            reps = [class_rowsums(tm, aux.images[pool[torch.randint(len(pool), (b,), generator=gen)]], i, aux.normalized)
                    for _ in range(self.opt("repeats"))]
            sums[i], seen[i] = torch.stack(reps).mean(0), True
        if seen.sum() < 2:
            raise ValueError("llg-plus needs auxiliary samples of at least two classes")
        offset = torch.stack([sums[seen & (torch.arange(c) != j), j].mean() for j in range(c)])
        own = torch.where(seen, sums.diagonal(), torch.nan)
        per_class = (own - offset) / b
        per_class = torch.where(seen, per_class, per_class[seen].mean())  # classes without aux: the mean impact
        g = output_weight_grad_rowsums(tm).cpu()
        h1 = torch.nonzero(g < 0).flatten()
        impact = per_class if self.opt("impact") == "per-class" else float(per_class.mean() * (1 + 1 / c))
        labels = greedy_counts(g - offset, h1, impact, b)
        counts = torch.bincount(torch.tensor(labels), minlength=c)
        raw = ((g - offset) / per_class).clamp_min(0)
        return LabelResult(raw, counts, {"impact": per_class.tolist(), "offset": offset.tolist(), "aux": aux.kind,
                                         "classes_without_aux": torch.nonzero(~seen).flatten().tolist()})
