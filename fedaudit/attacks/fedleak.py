"""FedLeak (Fan et al., USENIX Security 2025), Algorithm 1.

Each iteration:
1. g' = grad_w CE(F(x'), y) through the real model (second order).
2. Lambda = the top-R% entries of |g'| (of the *dummy* gradient, detached), recomputed every iteration (Sec. 4.2).
3. D(x') = L1(g'[Lambda], g_hat[Lambda]) + (1 - cos(g'[Lambda], g_hat[Lambda])) + alpha TV(x') + beta act-L1  (Eq. 4.4)
4. Gradient regularisation (Sec. 4.3, Eqs. 12-13): d1 = grad_x D(x'); phi = k d1/||d1||; d2 = grad_x D(x' + phi)
   with the same Lambda; Adam steps along (1 - lambda') d1 + lambda' d2; clamp to [0,1].
Defaults are the paper's: U[0,1] init, Adam lr 1e-4, 10,000 iterations, R = 50%, alpha 1e-5, beta 1e-4, no restarts.

The paper leaves or contradicts these; each is an option (shared/specs/fedleak.md section 6):
* ``--blend`` lambda' = 0.7, the value the text states (Table 16 points to 0.5, Appendix D and the code to 0.3).
* ``--look-ahead ascent`` (+phi along +grad D, Eq. 12 and Alg. 1) or ``descent`` (Appendix D, the code).
* ``--radius`` k as an RMS pixel displacement: ||phi|| = radius * sqrt(#pixels); default 0.01 (not given).
* ``--scope per-tensor`` (top-R% within each tensor, as the code's per-tensor median for R = 50) or ``global``.
* Reductions: L1 is the mean absolute difference over Lambda; the cosine is one cosine over Lambda; TV is mean
  anisotropic TV; the activation term is the mean |activation| of every ReLU/sigmoid output, summed over layers.
"""

from __future__ import annotations

import math

import torch

from fedaudit.attacks import ATTACKS
from fedaudit.attacks.base import OptimizationAttack, total_variation
from fedaudit.attacks.init import uniform_init
from fedaudit.labels.base import MethodOption


def top_mask(g: list[torch.Tensor], ratio: float, scope: str) -> list[torch.Tensor]:
    """Float 0/1 masks of the top ``ratio`` fraction of |g| (per tensor, or over all tensors at once). The
    threshold is a k-th order statistic (``kthvalue``, linear time), and masks multiply rather than index, so
    the backward pass needs no gather/scatter."""
    with torch.no_grad():
        if scope == "global":
            v = torch.cat([t.abs().reshape(-1) for t in g])
            k = max(1, int(round(ratio * v.numel())))
            thresh = torch.kthvalue(v, v.numel() - k + 1).values
            return [(t.abs() >= thresh).to(t.dtype) for t in g]
        masks = []
        for t in g:
            v = t.abs().reshape(-1)
            k = max(1, int(round(ratio * v.numel())))
            thresh = torch.kthvalue(v, v.numel() - k + 1).values
            masks.append((t.abs() >= thresh).to(t.dtype))
        return masks


@ATTACKS.register("fedleak")
class FedLeak(OptimizationAttack):
    name = "fedleak"
    summary = "partial gradient matching on the top-R% of the dummy gradient + blended look-ahead step"
    paper = "Fan et al. 2025, FedLeak (USENIX Security)"
    defaults = {"iterations": 10000, "lr": 1e-4, "schedule": "none", "restarts": 1}
    options = (
        MethodOption("ratio", float, 0.5, "R: fraction of the dummy gradient's largest entries matched"),
        MethodOption("blend", float, 0.7, "lambda': weight of the look-ahead gradient"),
        MethodOption("look-ahead", str, "ascent", "direction of phi: ascent (Eq. 12, Alg. 1) or descent (App. D)", ("ascent", "descent")),
        MethodOption("radius", float, 0.01, "k as RMS pixel displacement: ||phi|| = radius * sqrt(#pixels)"),
        MethodOption("scope", str, "per-tensor", "top-R% per tensor or over all tensors", ("per-tensor", "global")),
        MethodOption("tv", float, 1e-5, "alpha: total-variation weight"),
        MethodOption("act", float, 1e-4, "beta: activation-L1 weight"),
    )

    def init_state(self, gen):
        return {"x": uniform_init(self.tm.spec, self.shape, gen).to(self.engine.device).requires_grad_(True)}

    def _objective(self, x, masks=None):
        acts = [] if self.options["act"] else None
        g = self.engine.gradient(x, self.labels, capture=acts)
        if masks is None:
            masks = top_mask(g, self.options["ratio"], self.options["scope"])
        target = self.engine.target.tensors
        count = sum(m.sum() for m in masks)
        l1 = sum(((t - u).abs() * m).sum() for t, u, m in zip(g, target, masks)) / count
        dot = sum((t * u * m).sum() for t, u, m in zip(g, target, masks))
        na = torch.sqrt(sum((t * t * m).sum() for t, m in zip(g, masks)))
        nb = torch.sqrt(sum((u * u * m).sum() for u, m in zip(target, masks)))
        d = l1 + 1 - dot / (na * nb).clamp_min(1e-30)
        if self.options["tv"]:
            d = d + self.options["tv"] * total_variation(x)
        if acts:
            d = d + self.options["act"] * sum(t.abs().mean() for t in acts)
        return d, masks

    def closure(self, state, it):
        x = state["x"]
        d, masks = self._objective(x)
        (d1,) = torch.autograd.grad(d, [x])
        lam = self.options["blend"]
        if lam:
            sign = 1.0 if self.options["look-ahead"] == "ascent" else -1.0
            k = self.options["radius"] * math.sqrt(x.numel())
            phi = sign * k * d1 / d1.norm().clamp_min(1e-30)
            x_ahead = (x.detach() + phi).requires_grad_(True)
            d_ahead, _ = self._objective(x_ahead, masks)
            (d2,) = torch.autograd.grad(d_ahead, [x_ahead])
            x.grad = (1 - lam) * d1 + lam * d2
        else:
            x.grad = d1
        return d.detach()

    def distance(self, state):
        with torch.enable_grad():
            d, _ = self._objective(state["x"].detach())
        return float(d.detach())
