"""LLG+ (Wainakh et al. 2022, "v2"): LLG with the impact and per-class offsets measured on labelled auxiliary
data passed through the current model; with ``--dummy`` it is LLG* (dummy inputs, round-robin labels).

For each class i, ``--repeats`` batches of B aux samples of class i give row sums g^(i) (computed in closed form,
g^(i)_j = mean_n (p_nj - 1[j=i]) * sum_m h_nm, which is exactly the mean-CE weight gradient's row sum).
The offset of class j is the mean of g^(i)_j over i != j (where an absent class sits); a sample of class j moves
g_j by m_j = (g^(j)_j - offset_j) / B. The victim's offsets are subtracted, then LLG's assignment loop runs with
the impact either averaged over classes times (1 + 1/C) (``--impact global``, as the reference code) or per
class (``--impact per-class``). H1 is taken before the offsets are subtracted, as in the reference code.
Float counts reported: (g_j - offset_j) / m_j.

The per-class row sums depend on the model, the aux set, B, the seed and ``--repeats``, not on the update: the last
few are kept, keyed by their content (``_CALIBRATED``), so the clients of one round (one global model) pay for them
once. Not kept where a train-mode forward draws random numbers (dropout). Without train-mode BatchNorm a sample's
features do not depend on its batch-mates: the aux set then passes through the model once and each batch's row sums
are its members' mean (the same batches; the reference code's batch-by-batch passes cost C x repeats x B samples).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch.nn import functional as F

from fedaudit.errors import NotApplicable
from fedaudit.labels.base import LabelMethod, LabelResult, samples_in_update
from fedaudit.labels.features import head_stats, output_weight_grad_rowsums
from fedaudit.labels.llg import greedy_counts
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.models.digest import state_digest, tensors_digest
from fedaudit.models.head import draws_random
from fedaudit.requirements import BATCH_SIZE, FINAL_WEIGHT_GRAD
from fedaudit.session import Aux, Session
from fedaudit.threat_model import ThreatModel

_CALIBRATED: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()  # key -> (sums, seen)
KEEP = 8

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
        sums, seen = self.calibration(tm, aux, b, session.seed)
        if seen.sum() < 2:
            raise ValueError("llg-plus needs auxiliary samples of at least two classes")
        offset = torch.stack([sums[seen & (torch.arange(c, device=seen.device) != j), j].mean() for j in range(c)])
        own = torch.where(seen, sums.diagonal(), torch.nan)
        per_class = (own - offset) / b
        per_class = torch.where(seen, per_class, per_class[seen].mean())  # classes without aux: the mean impact
        g = output_weight_grad_rowsums(tm).cpu()
        h1 = torch.nonzero(g < 0).flatten()
        impact = per_class if self.opt("impact") == "per-class" else float(per_class.mean() * (1 + 1 / c))
        labels = greedy_counts(g - offset, h1, impact, b)
        counts = torch.bincount(torch.tensor(labels, dtype=torch.long, device="cpu"), minlength=c)
        raw = ((g - offset) / per_class).clamp_min(0)
        return LabelResult(raw, counts, {"impact": per_class.tolist(), "offset": offset.tolist(), "aux": aux.kind,
                                         "classes_without_aux": torch.nonzero(~seen).flatten().tolist()})

    def calibration(self, tm: ThreatModel, aux: Aux, b: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(sums [C, C]: sums[i] the mean row sums of ``--repeats`` batches of B aux samples of class i; seen [C]:
        the classes with aux samples), from ``_CALIBRATED`` where the same model, aux set and settings made them."""
        c, repeats, aux_labels = tm.spec.num_classes, self.opt("repeats"), aux.labels
        assert aux_labels is not None  # run() says "not applicable" without them
        random = draws_random(tm.model, tm.train_bn)
        key = None if random else (
            state_digest(tm.model), tensors_digest([aux.images, aux_labels]), aux.normalized, b, seed, repeats,
            tm.train_bn, tm.output_layer, repr(tm.spec), str(next(tm.model.parameters()).device))
        if key is not None and key in _CALIBRATED:
            _CALIBRATED.move_to_end(key)
            sums, seen = _CALIBRATED[key]
            return sums.clone(), seen.clone()
        gen = torch.Generator().manual_seed(seed)
        sums = torch.zeros(c, c, dtype=torch.float64, device="cpu")  # the label algebra runs on the host
        seen = torch.zeros(c, dtype=torch.bool, device="cpu")
        # a sample's features do not depend on its batch-mates (no train-mode BatchNorm): one pass over the aux set,
        # then each batch's row sums are the mean of its members' (the same batches as batch by batch)
        alone = not tm.train_bn or not (tm.has_batchnorm or random)
        rows = hsum = None
        if alone:
            h, p = head_stats(tm, aux.images, normalized=aux.normalized)
            hsum = h.sum(1)
            rows = p * hsum[:, None]  # less the label's term below: mean_n (p_n - 1[. = i]) sum_m h_nm
        for i in range(c):
            pool = torch.nonzero(aux_labels == i).flatten()
            if len(pool) == 0:
                continue
            draws = [pool[torch.randint(len(pool), (b,), generator=gen, device="cpu").to(pool.device)] for _ in range(repeats)]
            if rows is not None and hsum is not None:
                reps = [rows[idx].mean(0) - hsum[idx].mean() * F.one_hot(torch.tensor(i, device=rows.device), c) for idx in draws]
            else:
                reps = [class_rowsums(tm, aux.images[idx], i, aux.normalized) for idx in draws]
            sums[i], seen[i] = torch.stack(reps).mean(0), True
        if key is not None:
            _CALIBRATED[key] = (sums.clone(), seen.clone())
            while len(_CALIBRATED) > KEEP:
                _CALIBRATED.popitem(last=False)
        return sums, seen
