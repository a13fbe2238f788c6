"""A truth-free score of candidate label counts: how well they explain the output layer's update under the model.

With mean-reduced cross-entropy the output layer's gradient over a batch is G = (1/B) sum_i (p_i - e_{y_i}) [h_i, 1]^T.
Its expectation given the class counts n is linear in n:

    E[G | n] = (1/N) sum_c n_c M_c,   M_c = E[(p - e_c) [h, 1]^T | y = c]

M_c is measured on labelled aux images (else Gaussian dummies labelled round-robin) through the global model, or, for
a K-step delta or weights upload, averaged over the models on the path to the client's final model (as RLU's
``interpolate`` trajectory; fedaudit/labels/rlu.py). A candidate's score is the mean over the shared parts (weight,
bias) of the cosine distance 1 - cos(E[G | n], G_observed): 0 explains the update perfectly. Cosine, not an L2
residual, because aux features differ in scale from the victim's; the weight and bias parts are scored separately
so that the bias (C numbers) is not drowned by the weight (C x M).
"""

from __future__ import annotations

import torch

from fedaudit.models.head import output_layer_io
from fedaudit.session import Aux
from fedaudit.threat_model import ThreatModel


class Evidence:
    """Class moments M_c of one threat model and aux set; ``score(counts)`` for any number of candidates."""

    def __init__(self, tm: ThreatModel, aux: Aux):
        if aux.labels is None:
            raise ValueError("evidence needs labelled aux data or dummies")
        self.parts = [p for p in ("weight", "bias") if tm.grad(f"{tm.output_layer}.{p}") is not None]
        keep = (aux.labels >= 0) & (aux.labels < tm.spec.num_classes)
        images, labels = aux.images[keep], aux.labels[keep].long()
        c = tm.spec.num_classes
        self.moments: dict[str, torch.Tensor] = {}
        for weight, model in tm.models_along_update():
            h, z = output_layer_io(model, tm.spec, tm.output_layer, images, tm.train_bn, aux.normalized)
            err = torch.softmax(z, 1) - torch.nn.functional.one_hot(labels, c).double()  # [N, C]
            for part in self.parts:
                x = h if part == "weight" else torch.ones(len(h), 1, dtype=h.dtype, device=h.device)
                per = torch.stack([(err[labels == k, :, None] * x[labels == k, None, :]).mean(0) if (labels == k).any()
                                   else torch.full((c, x.shape[1]), torch.nan, dtype=h.dtype, device=h.device) for k in range(c)])
                missing = per.flatten(1).isnan().any(1)
                if missing.all():
                    raise ValueError("evidence: no aux sample has a class label in range")
                per[missing] = per[~missing].mean(0)  # classes without aux samples: the mean of the others
                self.moments[part] = self.moments.get(part, 0) + weight * per.flatten(1)
        self.observed = {p: tm.output_grad(p).double().flatten().cpu() for p in self.parts}

    def score(self, counts: torch.Tensor) -> float:
        """Mean cosine distance between the update expected under ``counts`` and the observed one (0 = perfect)."""
        n = counts.double().cpu()
        n = n / n.sum().clamp_min(1e-12)
        dists = [1 - float(torch.nn.functional.cosine_similarity(n @ self.moments[p], self.observed[p], dim=0))
                 for p in self.parts]
        return sum(dists) / len(dists)
