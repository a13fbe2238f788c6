"""Soteria (Sun et al., CVPR 2021): prune the output layer's weight gradient where its input representation r
is most informative about the images.

For each feature f of r (the output layer's input), score_f = sum_b ||d r_bf / d x|| / |r_bf| over the client's
batch (the official code's ratio; a zero feature scores +inf and is kept); the ``ratio`` fraction of features
with the lowest score lose their column of the output layer's weight gradient. Every other tensor is uploaded
unchanged. Needs the client's batch (one backward per feature, batched here).
"""

from __future__ import annotations

import torch
from torch.func import functional_call

from fedaudit.defenses.base import Defense
from fedaudit.defenses.registry import DEFENSES
from fedaudit.errors import InputError
from fedaudit.methods import MethodOption
from fedaudit.models.normalize import normalize
from fedaudit.requirements import FINAL_WEIGHT_GRAD

CHUNK = 64


def feature_scores(tm, images: torch.Tensor) -> torch.Tensor:
    model = tm.model
    head = dict(model.named_modules())[tm.final_layer]
    x = images.to(tm.device).clone().requires_grad_(True)  # the batch meets the model where it is
    captured: dict[str, torch.Tensor] = {}
    hook = head.register_forward_hook(lambda m, inp, out: captured.update(r=inp[0]))
    state = {k: v.detach() for k, v in model.named_parameters()}
    state.update({k: v.clone() for k, v in model.named_buffers()})
    model.train(tm.train_bn)
    try:
        functional_call(model, state, (normalize(x, tm.spec),))
    finally:
        hook.remove()
        model.eval()
    r = captured["r"].flatten(1)  # [B, H]
    b, h = r.shape
    scores = torch.empty(h, dtype=torch.float64, device="cpu")
    for start in range(0, h, CHUNK):
        feats = torch.arange(start, min(start + CHUNK, h), device=r.device)
        basis = torch.zeros(len(feats), b, h, dtype=r.dtype, device=r.device)
        basis[torch.arange(len(feats), device=r.device), :, feats] = 1.0
        (dx,) = torch.autograd.grad(r, x, grad_outputs=basis, is_grads_batched=True, retain_graph=True)
        norms = dx.flatten(2).norm(dim=2).double()  # [chunk, B]
        denom = r[:, feats].detach().abs().T.double()  # [chunk, B]
        ratio = torch.where(denom > 0, norms / denom.clamp_min(1e-300), torch.full_like(norms, float("inf")))
        scores[feats.cpu()] = ratio.sum(1).cpu()
    return scores


@DEFENSES.register
class Soteria(Defense):
    name = "soteria"
    summary = "prune the output layer's gradient where its input representation leaks most (needs the batch)"
    paper = "Sun et al. 2021, Soteria (CVPR)"
    requires = (FINAL_WEIGHT_GRAD,)
    needs_batch = True
    options = (MethodOption("ratio", float, 0.5, "fraction of representation features whose gradient column is pruned"),)

    def validate(self) -> None:
        if not 0 <= self.opts["ratio"] <= 1:
            raise InputError(f"soteria: ratio must be in [0, 1], got {self.opts['ratio']}")

    def apply(self, tm, grads, session, batch):
        ratio = self.opts["ratio"]
        name = f"{tm.final_layer}.weight"
        scores = feature_scores(tm, batch.images)
        k = int(round(ratio * len(scores)))
        pruned = torch.argsort(scores, stable=True)[:k]
        mask = torch.ones(len(scores), device="cpu")
        mask[pruned] = 0
        out = dict(grads)
        out[name] = grads[name] * mask.view(1, -1).to(grads[name])
        self.info = {"layer": name, "features": len(scores), "pruned_features": k}
        return out
