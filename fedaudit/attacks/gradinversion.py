"""GradInversion ("See through Gradients", Yin et al., CVPR 2021): gradient matching with fidelity priors,
BatchNorm-statistic matching and group consistency over several seeds (docs/methods/attacks.md, GradInversion).

For each of G seeds x_g (a batch of B images in the network's normalised space, N(0,1) init):

    L_g = a_G sum_l ||grad_l(x_g) - g_hat_l||_2  + a_tv TV(x_g) + a_l2 mean_i ||x_g,i||_2 + a_BN R_BN(x_g)
          + a_group ||x_g - E||_2                                                     (Eqs. 3, 9-11)

E is the consensus of the seeds (Eq. 12): from a quarter of the run, every 1/200 of it, each seed's image of a slot
is registered onto the slots' mean and the registered images are averaged. Adam (lr 0.1, 50 warm-up iterations
then cosine) steps every seed; Langevin noise lr * a_n * N(0, I) is added after each step (Sec. 3.5); images are
kept in the valid box.

Choices where the paper is silent or fedaudit departs from it, each an option:
* ``--num-seeds`` 4 (the paper: 8; a CPU costs G times IG per iteration). The seeds live in one G x B tensor and are
  stepped together, but each seed gets its own forward: with train-mode BatchNorm one G x B forward would
  normalise every seed with the others' statistics and change each seed's gradient (a functorch vmap over the
  seeds was exact but 4x slower on the CPU).
* ``--registration shift`` (default): the paper's RANSAC-flow needs pretrained flow networks that are not available
  offline; fedaudit registers each seed onto the mean by the integer circular shift that maximises their
  cross-correlation (FFT), an approximate registration. ``none`` is the paper's "lazy" mean.
* ``--pick best`` returns the seed with the lowest gradient distance (never chosen by the truth);
  ``consensus`` returns E. The paper does not say which it reports.
* ``--grad-distance l2`` is the paper's unsquared per-layer norm; ``squared`` is breaching's and FGLA's.
* TV is DeepInversion's (the sum of the Frobenius norms of the horizontal, vertical and two diagonal pixel
  differences) and the L2 prior the mean image norm, both in the normalised space; the BN prior's targets follow
  ``--bn-stats`` (default auto: the client's batch statistics recovered from the update's BN buffers, else the
  checkpoint's running statistics, as the paper does), fedaudit/attacks/bn_prior.py.
* Labels come from the label methods (default ``auto``, which counts duplicates); the paper's rule is
  ``--labels yin`` (distinct labels only).
"""

from __future__ import annotations

import torch

from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.bn_prior import bn_options
from fedaudit.attacks.objectives import total
from fedaudit.attacks.registry import ATTACKS
from fedaudit.errors import InputError
from fedaudit.methods import MethodOption
from fedaudit.models.normalize import denormalize, pixel_box


def tv_l2(x: torch.Tensor) -> torch.Tensor:
    """DeepInversion's TV: Frobenius norms of the four neighbouring-pixel differences, summed."""
    return ((x[..., :, :-1] - x[..., :, 1:]).norm() + (x[..., :-1, :] - x[..., 1:, :]).norm()
            + (x[..., 1:, :-1] - x[..., :-1, 1:]).norm() + (x[..., :-1, :-1] - x[..., 1:, 1:]).norm())


def shift_register(seeds: torch.Tensor) -> torch.Tensor:
    """The consensus of ``seeds`` [G, B, C, H, W]: each seed's image of a slot is circularly shifted onto the
    slots' mean by the integer shift that maximises their cross-correlation, then the shifted images are averaged."""
    mean = seeds.mean(0)
    a = torch.fft.rfft2(seeds.sum(2))  # [G, B, H, W/2+1], channels summed
    b = torch.fft.rfft2(mean.sum(1))  # [B, H, W/2+1]
    corr = torch.fft.irfft2(b.unsqueeze(0) * a.conj(), s=seeds.shape[-2:])  # [G, B, H, W]: corr[dy, dx]
    h, w = seeds.shape[-2:]
    best = corr.flatten(2).argmax(-1)  # the shift taking seed onto the mean
    out = torch.empty_like(seeds)
    for g in range(seeds.shape[0]):
        for k in range(seeds.shape[1]):
            dy, dx = divmod(int(best[g, k]), w)
            out[g, k] = torch.roll(seeds[g, k], shifts=(dy if dy <= h // 2 else dy - h, dx if dx <= w // 2 else dx - w),
                                   dims=(-2, -1))
    return out.mean(0)


@ATTACKS.register
class GradInversion(OptimizationAttack):
    name = "gradinversion"
    summary = ("per-layer L2 gradient matching + TV/L2 + BN-statistic priors + group consistency of several seeds, Langevin "
               "noise; on BN models ahead of ig, without BN (AlexNet) smoother but fewer images identifiable than ig at equal time")
    paper = "Yin et al. 2021, See through Gradients: GradInversion (CVPR)"
    defaults = {"iterations": 4000, "lr": 0.1, "schedule": "warmup-cosine", "restarts": 1}
    options = (
        MethodOption("num-seeds", int, 4, "G: seeds optimised together and pulled toward their consensus (the paper: 8)"),
        MethodOption("grad-weight", float, 0.1, "a_G: weight of the gradient distance (the paper: 1e-3, at 224 px)"),
        MethodOption("grad-distance", str, "l2", "per-layer L2 norm (the paper) or squared norm (breaching, FGLA)", ("l2", "squared")),
        MethodOption("tv", float, 1e-3, "a_tv: total variation, DeepInversion's L2 form in the normalised space (the paper: 1e-4, at 224 px)"),
        MethodOption("l2", float, 1e-6, "a_l2: mean image L2 norm (normalised space)"),
        *bn_options("auto", 0.1),
        MethodOption("group", float, 0.01, "a_group: pull of each seed toward the consensus (0 = off)"),
        MethodOption("group-start", float, 0.25, "fraction of the run before the group term starts (the paper: 5,000 of 20,000)"),
        MethodOption("group-every", float, 0.005, "fraction of the run between consensus refreshes (the paper: 100 of 20,000)"),
        MethodOption("registration", str, "shift", "how seeds are aligned before averaging: integer cross-correlation shift, "
                     "or none (the lazy mean)", ("shift", "none")),
        MethodOption("langevin", float, 0.2, "a_n: Langevin noise lr * a_n * N(0, 1) added after each step (0 = off)"),
        MethodOption("pick", str, "best", "the seed with the lowest gradient distance, or the consensus", ("best", "consensus")),
    )

    def __init__(self, tm, engine, labels, options, num_images, iterations=None):
        super().__init__(tm, engine, labels, options, num_images, iterations)
        if self.opts["num-seeds"] < 1:
            raise InputError("gradinversion: --num-seeds must be >= 1")
        self.box = pixel_box(tm.spec, engine.device)
        self._it = 0

    # --- state --------------------------------------------------------------------------------------------------
    def init_state(self, gen):
        dev = self.engine.device
        x = torch.randn((self.opts["num-seeds"], *self.shape), generator=gen, device="cpu")  # drawn on the host
        noise_seed = torch.randint(2**31 - 1, (), generator=gen, device="cpu")
        return {"x": x.to(dev).requires_grad_(True), "e": torch.zeros(self.shape, device=dev),
                "noise_seed": noise_seed.to(dev)}

    def optimizer(self, state, lr):
        self._opt = torch.optim.Adam([state["x"]], lr=lr)
        return self._opt

    # --- objective ----------------------------------------------------------------------------------------------
    def _grad_distance(self, grads: list[torch.Tensor]) -> torch.Tensor:
        diffs = [g - t for g, t in zip(grads, self.engine.target.tensors)]
        if self.opts["grad-distance"] == "squared":
            return total([d.square().sum() for d in diffs])
        return total([d.norm() for d in diffs])

    def _group_on(self, it: int) -> bool:
        return self.opts["group"] > 0 and self.opts["num-seeds"] > 1 and it >= self.opts["group-start"] * self.iterations

    def _consensus(self, xn: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return shift_register(xn) if self.opts["registration"] == "shift" else xn.mean(0)

    def closure(self, state, it):
        self._it = it
        xs, o = state["x"], self.opts
        group = self._group_on(it)
        if group:
            every = max(1, round(o["group-every"] * self.iterations))
            start = int(o["group-start"] * self.iterations + 0.999999)
            if (it - start) % every == 0 or not bool(state["e"].abs().sum()):
                state["e"].copy_(self._consensus(xs.detach()))
        grad_x = torch.zeros_like(xs)
        loss_sum = 0.0
        for g in range(xs.shape[0]):  # one forward per seed: train-mode BN must see each seed's batch alone
            xg = xs[g]
            captured = self.bn_inputs()
            grads = self.engine.gradient(denormalize(xg, self.tm.spec), self.labels, bn_inputs=captured)
            loss = o["grad-weight"] * self._grad_distance(grads) + o["tv"] * tv_l2(xg) \
                + o["l2"] * xg.flatten(1).norm(dim=1).mean() + self.bn_term(captured)
            if group:
                loss = loss + o["group"] * (xg - state["e"]).norm()
            grad_x = grad_x + torch.autograd.grad(loss, [xs])[0]
            loss_sum += float(loss.detach())
        xs.grad = grad_x
        return torch.tensor(loss_sum, device="cpu")

    def project(self, state):
        with torch.no_grad():
            xs = state["x"]
            if self.opts["langevin"] > 0 and hasattr(self, "_opt"):
                lr = self._opt.param_groups[0]["lr"]
                gen = torch.Generator().manual_seed(int(state["noise_seed"]) * 1_000_003 + self._it)
                xs.add_(torch.randn(xs.shape, generator=gen, device="cpu").to(xs.device), alpha=lr * self.opts["langevin"])
            xs.copy_(torch.maximum(torch.minimum(xs, self.box[1]), self.box[0]))

    # --- results ------------------------------------------------------------------------------------------------
    def _distances(self, xs: torch.Tensor) -> list[float]:
        out = []
        for g in range(xs.shape[0]):
            grads = self.engine.gradient(denormalize(xs[g].detach(), self.tm.spec), self.labels, create_graph=False)
            out.append(float(self._grad_distance([t.detach() for t in grads])))
        return out

    def _chosen(self, state) -> tuple[torch.Tensor, float, list[float]]:
        xs = state["x"].detach()
        dists = self._distances(xs)
        if self.opts["pick"] == "consensus":
            e = self._consensus(xs)
            return e, self._distances(e.unsqueeze(0))[0], dists
        best = min(range(len(dists)), key=dists.__getitem__)
        return xs[best], dists[best], dists

    def distance(self, state):
        return self._chosen(state)[1]

    def images(self, state):
        return denormalize(self._chosen(state)[0], self.tm.spec).clamp(0, 1)

    def extras(self, state):
        _, d, dists = self._chosen(state)
        return {"report": {"seeds": self.opts["num-seeds"], "seed_distances": dists, "pick": self.opts["pick"],
                           "registration": "integer circular shift by cross-correlation (approximate; the paper uses "
                           "RANSAC-flow)" if self.opts["registration"] == "shift" else "none (lazy mean)",
                           "bn_prior": self.bn_usage}}
