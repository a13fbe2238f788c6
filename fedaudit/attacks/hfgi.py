"""HFGI Stage II (Ye et al., AAAI 2024): stepwise gradient inversion.

Eq. 10: x* = argmin 1 - cos(Mask (.) g'_L(t), Mask (.) g_L(t)) + R_image(x'), where
* L(t) is the matched layer set, growing from the output side (the gradient of layer l depends only on the
  features below it, so deep layers fix the content first, Eq. 9);
* Mask is fresh Bernoulli(keep 0.7) gradient dropout every iteration, shared by both gradients, no rescaling,
  and the cosine is one cosine over everything selected;
* R_image (Eq. 11) switches on in stages: TV after T1, the BN-statistic prior after T2 (Sec. 3.3 of the spec);
* the update (Eq. 12, code form) feeds a quantised sign of the image gradient to Adam, lr 0.1, x0.33 decays.

General layer schedule (the code's indices only fit ResNet-34's 110 tensors; docs/methods/attacks.md, HFGI):
with n matched-able tensors in model order, start with the deepest round(start_fraction * n) (never fewer
than the output layer's), add round(grow_fraction * n) more every grow_every of the run, up to
round(final_fraction * n); the shallowest tensors (the stem and the first stage in a ResNet) are never matched.
Defaults 0.1 / 1/11 / 0.782 / 1/30 reproduce the code on ResNet-34 exactly (11 tensors, +10 every 500 of
15,000 iterations, 86 at most). Every phase point (T1 = 0.2, T2 = 1/3, the x2 boost for the first 1/150) is a
fraction of the run, so shorter budgets keep the shape of the schedule.

Choices (paper vs code), as options: TV is the code's (anisotropic L1, mean, weight 5e-3, on
the normalised image); the update is the code's quantised sign (``--step-rule sign`` for the paper's pure sign,
``plain`` for none). Like the code, the image lives in the normalised space (N(0,1) init, per-channel box) and
the output is the final iterate. The BN prior needs running statistics in the checkpoint; without BatchNorm it
is skipped (reported). Labels come from the ``hfgi`` label method unless --labels says otherwise.
"""

from __future__ import annotations

import math

import torch

from fedaudit.attacks.base import OptimizationAttack, total_variation, total_variation_rows
from fedaudit.attacks.bn_prior import bn_options
from fedaudit.attacks.objectives import cosine_distance, cosine_distance_rows, row_norms, squared_norm
from fedaudit.attacks.registry import ATTACKS
from fedaudit.methods import MethodOption
from fedaudit.models.normalize import denormalize, pixel_box

BN_FIRST_WEIGHTS = (1.3, 3.0)  # the code's multipliers for the first two BN layers; the rest get 1


def matched_count(n: int, it: int, total: int, start: float, grow: float, final: float, every: float, floor: int) -> int:
    """How many of the n deepest tensors are matched at iteration ``it`` of ``total``."""
    first = min(n, max(floor, round(start * n)))
    last = max(first, min(n, round(final * n)))
    period = max(1, round(every * total))
    return min(last, first + round(grow * n) * ((it + 1) // period))  # the code widens after iteration 499, 999...


def quantized_sign(g: torch.Tensor, rows: bool = False) -> torch.Tensor:
    """The code's 'hard_quantify': +-0.2 below a quarter of the median |g|, +-0.6 below 3/4, +-1 above. ``rows``:
    each restart of a stacked [R, ...] gradient against its own median."""
    if rows:
        m = g.flatten(1).abs().median(1).values.view(-1, *[1] * (g.dim() - 1))
    else:
        m = g.abs().median()
    q = torch.clamp(torch.round(2 * g / (m + 1e-10)) / 2, -1, 1)
    return 0.8 * q + 0.2 * g.sign()


@ATTACKS.register
class HFGI(OptimizationAttack):
    name = "hfgi"
    summary = ("stepwise inversion: layers added from the output side, gradient dropout, staged TV/BN priors, quantised-sign "
               "Adam; at equal time weaker than ig on AlexNet at B = 16 (docs/results/pretrained.md)")
    paper = "Ye et al. 2024, HFGI (AAAI), Stage II"
    defaults = {"iterations": 15000, "lr": 0.1, "schedule": "step-0.33", "restarts": 1}
    default_labels = "hfgi"
    options = (
        MethodOption("dropout", float, 0.3, "gradient dropout rate (fresh mask every iteration)"),
        MethodOption("start-fraction", float, 0.1, "deepest fraction of the tensors matched at the start"),
        MethodOption("grow-fraction", float, 1 / 11, "fraction of the tensors added at each widening"),
        MethodOption("final-fraction", float, 0.782, "largest matched fraction (the shallowest are never matched)"),
        MethodOption("grow-every", float, 1 / 30, "fraction of the run between widenings"),
        MethodOption("tv", float, 5e-3, "TV weight (anisotropic L1 mean on the normalised image; the paper's L2 form: 0.01)"),
        MethodOption("tv-start", float, 0.2, "T1: fraction of the run before TV switches on"),
        *bn_options("running", 1e-4),
        MethodOption("bn-start", float, 1 / 3, "T2: fraction of the run before the BN prior switches on"),
        MethodOption("step-rule", str, "quantized", "quantized sign (code), sign (paper Eq. 12) or plain", ("quantized", "sign", "plain")),
        MethodOption("boost", float, 1 / 150, "fraction of the run whose steps are doubled (the code's first 100 of 15,000)"),
    )

    def __init__(self, tm, engine, labels, options, num_images, iterations=None):
        super().__init__(tm, engine, labels, options, num_images, iterations)
        names = engine.target.names
        final = tm.final_layer
        self.final_count = sum(1 for k in names if final and k.startswith(final + ".")) or 1
        self.box = pixel_box(tm.spec, engine.device)

    def matched(self, it: int) -> list[str]:
        names = self.engine.target.names
        o = self.opts
        k = matched_count(len(names), it, self.iterations, o["start-fraction"], o["grow-fraction"],
                          o["final-fraction"], o["grow-every"], self.final_count)
        return names[len(names) - k:]

    def init_state(self, gen):
        return {"x": torch.randn(self.shape, generator=gen, device="cpu").to(self.engine.device).requires_grad_(True)}

    def _targets(self, names: list[str], gen: torch.Generator | None) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """The target tensors of ``names`` and this iteration's dropout masks (None without dropout): dropped
        entries are zeroed in both gradients (a product, not a gather)."""
        index = {k: i for i, k in enumerate(self.engine.target.names)}
        t = [self.engine.target.tensors[index[k]] for k in names]
        if self.opts["dropout"] <= 0 or gen is None:
            return t, None
        lead = 1 if self.engine.target.groups else 0  # stacked targets: one mask for every group, as in its own run
        masks = [(torch.rand(b.shape[lead:], generator=gen, device="cpu").to(b.device) > self.opts["dropout"]).to(b.dtype)
                 for b in t]
        return [b * m for b, m in zip(t, masks)], masks

    def objective(self, xn: torch.Tensor, it: int, gen: torch.Generator | None) -> torch.Tensor:
        o, total = self.opts, self.iterations
        names = self.matched(it)
        use_bn = bool(self.bn_targets) and o["bn"] > 0 and it >= o["bn-start"] * total
        captured = self.bn_inputs() if use_bn else None
        g = self.engine.gradient(denormalize(xn, self.tm.spec), self.labels, names=names, bn_inputs=captured)
        t, masks = self._targets(names, gen)
        if masks is not None:
            g = [a * m for a, m in zip(g, masks)]
        with torch.no_grad():
            t_norm = squared_norm(t).sqrt()
        loss = cosine_distance(g, t, t_norm)  # per tensor, no concatenation (fedaudit/attacks/objectives.py)
        if o["tv"] and it >= o["tv-start"] * total:
            loss = loss + o["tv"] * total_variation(xn)
        return loss + self.bn_term(captured, BN_FIRST_WEIGHTS)

    def _step(self, g: torch.Tensor, it: int, rows: bool = False) -> torch.Tensor:
        mode = self.opts["step-rule"]
        if mode == "quantized":
            g = quantized_sign(g, rows)
        elif mode == "sign":
            g = g.sign()
        if it < math.ceil(self.opts["boost"] * self.iterations):
            g = 2 * g
        return g

    def closure(self, state, it):
        xn = state["x"]
        gen = torch.Generator().manual_seed(1_000_003 + it)  # the dropout mask depends on the iteration only: resumable
        loss = self.objective(xn, it, gen)
        (g,) = torch.autograd.grad(loss, [xn])
        xn.grad = self._step(g, it)
        return loss.detach()

    stacks_targets = True  # batched_closure's targets, masks and norms are per group on stacked targets

    def why_not_batched(self):
        if self.bn_targets and self.opts["bn"] > 0:
            return "the BN-statistic prior (--bn-stats) runs restarts one after another"
        if self.engine.unroll:
            return "--multi-step unroll runs restarts one after another"
        return None

    def batched_closure(self, state, it):
        """``closure`` for stacked restarts: the same layers and dropout masks for every restart (both depend on the
        iteration only), each restart's own cosine, TV and quantised step."""
        xn, o = state["x"], self.opts  # [R, B, C, H, W], normalised
        names = self.matched(it)
        g = self.engine.batched_gradient(denormalize(xn, self.tm.spec), self.labels, names)
        t, masks = self._targets(names, torch.Generator().manual_seed(1_000_003 + it))
        if masks is not None:
            g = [a * m for a, m in zip(g, masks)]  # one mask per tensor, broadcast over the restarts
        with torch.no_grad():  # [G] norms for stacked targets (fedaudit/attacks/stacked_targets.py)
            t_norm = row_norms(t) if self.engine.target.groups else squared_norm(t).sqrt()
        loss = cosine_distance_rows(g, t, t_norm)
        if o["tv"] and it >= o["tv-start"] * self.iterations:
            loss = loss + o["tv"] * total_variation_rows(xn)
        (grad,) = torch.autograd.grad(loss.sum(), [xn])
        xn.grad = self._step(grad, it, rows=True)
        return loss.detach()

    def project(self, state):
        with torch.no_grad():
            state["x"].copy_(torch.maximum(torch.minimum(state["x"], self.box[1]), self.box[0]))

    def images(self, state):
        return denormalize(state["x"].detach(), self.tm.spec).clamp(0, 1)

    def distance(self, state):
        """1 - cosine over every matched-able tensor, no dropout (to compare restarts)."""
        g = self.engine.gradient(denormalize(state["x"].detach(), self.tm.spec), self.labels, create_graph=False)
        return float(cosine_distance(g, self.engine.target.tensors, self.engine.target.norm))

    def extras(self, state):
        names = self.engine.target.names
        schedule = []
        for it in range(self.iterations):
            k = len(self.matched(it))
            if not schedule or schedule[-1][1] != k:
                schedule.append((it, k))
        return {"report": {"layer_schedule": [{"from_iteration": it, "matched": k, "shallowest": names[len(names) - k]}
                                              for it, k in schedule],
                           "tensors_matchable": len(names),
                           "bn_prior": "on" if self.bn_targets and self.opts["bn"] > 0 else
                           "off: the model has no BatchNorm running statistics" if not self.bn_targets else "off",
                           "bn_targets": self.bn_usage}}
