"""Refiner (Fan et al., data-refining defense): upload the gradient of "robust data" x* that keeps the gradient's
utility and looks like noise to a critic, projected into an eps-ball around the true gradient.

    w_i  = |g_i * theta_i| * tau^i           (Eq. 3; fixed; i = module index from the input side)
    x*_0 = (1 - alpha) x + alpha U(0, 1)     (noise-blended start; alpha = 0 gives adversarial near-copies)
    x*  <- clamp(x* - lr grad_x* [UM(x*) - beta PM(x*)], 0, 1),  iota times    (Eq. 2)
    upload = g* if ||g* - g|| <= eps else g + eps (g* - g) / ||g* - g||   (Sec. 4.1; App. C is missing)

Choices where the paper is silent or contradicts itself (docs/methods/defenses.md), as options:
* ``--um squared`` (default): UM = sum (w (g* - g))^2, Eq. 4 as printed; ``linear``: sum w (g* - g)^2, the text's
  "weighted MSE".
* PM = mean of D(x*) over the batch (D: ``fedaudit train-refiner-critic``); Eq. 2 maximises it.
* Plain gradient descent, lr 1 (the only step size given, Fig. 6), iota = 10, clamping to [0, 1].
* eps is an absolute L2 radius on the whole flattened gradient (the paper's grid 0.01 ... 0.9).
* g is the gradient entering this defense (the true one when Refiner is first in the chain); labels are the
  batch's true labels (Refiner protects images, not labels).
"""

from __future__ import annotations

import torch

from fedaudit.attacks.engine import GradientEngine
from fedaudit.defenses.base import Defense, unflat
from fedaudit.defenses.critic import load_critic
from fedaudit.defenses.registry import DEFENSES
from fedaudit.errors import InputError
from fedaudit.methods import MethodOption
from fedaudit.requirements import SINGLE_STEP


def module_index(names: list[str]) -> dict[str, int]:
    """1-based layer index of each parameter, counting modules from the input side (weight and bias share one)."""
    order: dict[str, int] = {}
    for n in names:
        order.setdefault(n.rsplit(".", 1)[0], len(order) + 1)
    return {n: order[n.rsplit(".", 1)[0]] for n in names}


@DEFENSES.register
class Refiner(Defense):
    name = "refiner"
    summary = "upload the gradient of refined, noise-like data, projected within eps of the true gradient (needs the batch)"
    paper = "Fan et al., Refiner: data refining against gradient leakage"
    requires = (SINGLE_STEP,)
    needs_batch = True
    options = (
        MethodOption("critic", str, "", "noise-ratio network D from 'fedaudit train-refiner-critic' (required)"),
        MethodOption("eps", float, 0.1, "epsilon: projection radius (absolute L2 on the flattened gradient; not a DP epsilon)"),
        MethodOption("alpha", float, 0.5, "noise fraction of the initial x*"),
        MethodOption("beta", float, 1.0, "weight of the privacy metric"),
        MethodOption("steps", int, 10, "iota: refinement steps"),
        MethodOption("tau", float, 0.95, "layer decay of the utility weights"),
        MethodOption("lr", float, 1.0, "gradient-descent step on x*"),
        MethodOption("um", str, "squared", "utility metric form: squared (Eq. 4 as printed) or linear (weighted MSE)", ("squared", "linear")),
    )

    def validate(self) -> None:
        if not self.opts["critic"]:
            raise InputError("refiner: needs --critic (train one with 'fedaudit train-refiner-critic')")

    def apply(self, tm, grads, session, batch):
        o = self.opts
        critic = load_critic(o["critic"]).to(session.device)
        x, y = batch.images.float(), batch.labels.long()
        if tuple(critic.image_shape) != tuple(x.shape[1:]):
            raise InputError(f"refiner: the critic takes {critic.image_shape} images, the batch has {tuple(x.shape[1:])}")
        for p in critic.parameters():
            p.requires_grad_(False)
        engine = GradientEngine(tm, session.device)
        names = engine.target.names
        g = [grads[k].to(session.device, torch.float32) for k in names]
        params = dict(tm.model.named_parameters())
        idx = module_index(names)
        w = [(gi * params[k].detach()).abs() * o["tau"] ** idx[k] for gi, k in zip(g, names)]
        gen = torch.Generator().manual_seed(session.seed)
        xs = ((1 - o["alpha"]) * x + o["alpha"] * torch.rand(x.shape, generator=gen, device="cpu").to(x.device)).clamp(0, 1)
        history = []
        for _ in range(o["steps"]):
            xs = xs.detach().requires_grad_(True)
            gs = engine.gradient(xs, y)
            if o["um"] == "squared":
                um = sum(((wi * (a - b)) ** 2).sum() for wi, a, b in zip(w, gs, g))
            else:
                um = sum((wi * (a - b) ** 2).sum() for wi, a, b in zip(w, gs, g))
            pm = critic(xs).mean()
            (step,) = torch.autograd.grad(um - o["beta"] * pm, [xs])
            history.append({"um": float(um.detach()), "pm": float(pm.detach())})
            xs = (xs.detach() - o["lr"] * step).clamp(0, 1)
        gs = [t.detach() for t in engine.gradient(xs, y, create_graph=False)]
        d = torch.cat([(a - b).reshape(-1) for a, b in zip(gs, g)])
        dist = float(d.norm())
        projected = dist > o["eps"]
        upload = torch.cat([b.reshape(-1) for b in g]) + (d * (o["eps"] / dist) if projected else d)
        with torch.no_grad():
            pm_final = float(critic(xs).mean())
        self.info = {"critic_mean_D": pm_final, "distance_to_true_gradient": min(dist, o["eps"]) if projected else dist,
                     "refined_distance_before_projection": dist, "projected": projected,
                     "robust_data_mse": float(((xs - x) ** 2).mean()), "history": history}
        return unflat(upload.cpu(), {k: grads[k] for k in names})
