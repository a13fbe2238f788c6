"""``client-fit``: the class mix of each local step whose simulated client reproduces the whole update.

Our method (no paper; docs/methods/labels.md, "client-fit"). RLU reads the counts from the output layer alone and
needs the models the client passed through, which the server never sees; on a fast-moving model its straight-path
guess of them is what fails (docs/results/labels.md: with the true path RLU is at 94-100%). Here the path is not
guessed but simulated, and the counts are what makes the simulation end where the client did:

* a client is simulated from the global model with the update's K, lr, momentum and weight decay; its step k's
  gradient is the *expected* gradient of a batch with class mix pi_k, ``sum_c pi_kc mean_{aux of class c} grad CE``
  (a fixed subset of ``--per-class`` labelled aux images per class, so the simulation is deterministic and smooth
  in pi; the victims' own images are not the aux ones, and their batches' draws are noise around it);
* pi_k = softmax(a_k), one mix per step (a client's batches need not share one mix: two-class clients in class
  order, Dirichlet clients' random draws), is fitted by Adam (``--iterations``, ``--step-size``) through the
  unrolled K steps (second derivatives) to minimise ``|Delta_sim - Delta|^2 / |Delta|^2`` over every uploaded
  parameter (a one-step update: the gradient itself, no learning rate needed);
* the steps' mixes are pulled toward their mean (``--pool``, 0.01): the loss adds ``pool x mean_k 2 B KL(pi_k ||
  mean pi) / (C - 1)``, about ``pool`` where the steps' batches are B random draws from one mix (the chi-square
  approximation), a prior that a client's batches are draws from its data. Without it the per-step mixes bend to fit
  the victims' own images (at the true counts the fit is worse than at the fitted ones). Chosen on 64 DLG LeNet
  clients (K 4/10, lr 0.01/0.05, momentum 0/0.9, B 8/32, random and Dirichlet): +0.8 +- 0.2 points InsAcc against
  none (0.05: +0.6 +- 0.4); held out on 48 others (trial 1, K 4/10, lr 0.02/0.05, B 16, random, Dirichlet and
  two-class clients): +0.4 +- 0.2, two-class clients (whose steps' mixes do differ) +0.1; a small gain
  (docs/results/labels.md, "client-fit's steps pooled");
* counts = B sum_k pi_k, projected to integers summing to B K; started from a uniform mix (``--init uniform``,
  default) or RLU's counts (``--init rlu``: as good or worse on the probe, and it costs RLU's run); the best
  iterate by the loss (fit plus pool) is kept and its fit reported (``diagnostics.fit``).

Choices, each an option: one mix per step (``--mix per-step``, default; ``shared``: one mix for all steps, 6.4
points behind on a 64-client DLG LeNet probe, docs/methods/labels.md); the whole update, not the output layer alone
(with one shared mix, the output layer alone was 2.8 points behind the whole update on the same probe; fixed, not an
option). BatchNorm in train mode normalises the aux batch with its own statistics (every
class in equal parts, whatever pi is): an approximation, reported in the warnings. On such a model (a width-16 BN
ConvNet) the simulated client explains little of the update (fit 0.55-1.25, where the LeNets reach about 0.1) and
client-fit trails the mean of the count methods by 7 points, so ``auto`` does not route those deltas here
(docs/results/labels.md, "client-fit on the BN ConvNet"). Classes without labelled aux images cannot be simulated and
get no samples (warned).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedaudit.conversion import client_change, optimizer_terms
from fedaudit.errors import NotApplicable
from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts, samples_in_update
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.models.attention import differentiable_attention
from fedaudit.models.normalize import normalize
from fedaudit.progress import advance
from fedaudit.requirements import BATCH_SIZE
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def aux_subset(labels: torch.Tensor, classes: int, per_class: int, gen: torch.Generator) -> torch.Tensor:
    """Indices of at most ``per_class`` aux samples of each class, drawn without replacement."""
    picked = []
    for c in range(classes):
        pool = torch.nonzero(labels == c).flatten()
        picked.append(pool[torch.randperm(len(pool), generator=gen, device="cpu").to(pool.device)[:per_class]])
    return torch.cat(picked)


@LABEL_METHODS.register
class ClientFit(LabelMethod):
    name = "client-fit"
    multi_step_aware = True
    summary = "fits each local step's class mix so that a client simulated on labelled aux data reproduces the update"
    paper = "fedaudit's own (docs/methods/labels.md)"
    requires = (BATCH_SIZE,)  # a several-step update always records its lr (fedaudit/io/update.py)
    aux = "labelled"
    options = (
        MethodOption("mix", str, "per-step", "one class mix per local step, or one shared by all steps",
                     ("per-step", "shared")),
        MethodOption("init", str, "uniform", "the starting mix: uniform, or RLU's counts (where RLU applies)",
                     ("uniform", "rlu")),
        MethodOption("per-class", int, 16, "labelled aux images per class in the simulated batches"),
        MethodOption("iterations", int, 60, "Adam steps on the mixes"),
        MethodOption("step-size", float, 0.1, "Adam's step size on the mixes' logits"),
        MethodOption("pool", float, 0.01, "weight of the pull of each step's mix toward the steps' mean mix, in units "
                     "of the spread batches of B random draws from one mix give (0: none)"),
    )

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        start = time.perf_counter()
        total, steps, b, c = samples_in_update(tm), tm.meta.local_steps, tm.batch_size or 1, tm.spec.num_classes
        fit, missing, used = self._simulation(tm, session)
        device = fit.x.device
        warnings = []
        if missing.any():
            warnings.append(f"no aux images of classes {torch.nonzero(missing).flatten().tolist()}: they get no samples")
        if tm.train_bn and tm.has_batchnorm:
            warnings.append("BatchNorm in train mode: the simulated batches are normalised with the aux subset's "
                            "statistics (every class alike), not the client's")

        init, init_name = self._initial_counts(tm, session, c)
        shares = (init.double().clamp_min(0) + 0.5).float().to(device)
        logits0 = torch.where(missing, torch.full_like(shares, -30.0), shares.log())
        a = (logits0.repeat(steps, 1) if self.opt("mix") == "per-step" else logits0.clone()).requires_grad_(True)
        opt = torch.optim.Adam([a], lr=self.opt("step-size"))
        several = steps > 1 and self.opt("mix") == "per-step"
        pool = self.opt("pool") if several else 0.0
        best, best_fit, best_spread, best_a, first = float("inf"), float("inf"), 0.0, a.detach().clone(), None
        iterations = max(1, self.opt("iterations"))
        for it in range(iterations):
            advance(it, iterations)  # each step unrolls the K simulated local steps: the method's whole cost
            mixes = torch.softmax(a, -1).expand(steps, c)
            misfit = fit.loss(mixes)
            spread = step_spread(mixes, b) if several else torch.zeros((), device=device)
            loss = misfit + pool * spread  # the pool: a prior that the steps' batches are draws from one mix
            value = float(loss.detach())
            first = float(misfit.detach()) if first is None else first
            if value < best:
                best, best_fit, best_spread, best_a = value, float(misfit.detach()), float(spread.detach()), a.detach().clone()
            opt.zero_grad()
            loss.backward()
            if a.grad is not None:  # Adam would move the logits of classes that cannot be simulated
                a.grad[..., missing] = 0
            opt.step()
        mixes = torch.softmax(best_a, -1).expand(steps, c).double().cpu()
        counts = b * mixes.sum(0)
        diagnostics = {"mix": self.opt("mix"), "init": init_name, "initial_counts": init.tolist(), "fit": best_fit,
                       "initial_fit": first, "pool": pool, "step_spread": best_spread,  # in the pool's units
                       "iterations": self.opt("iterations"), "aux_used": used,
                       "step_mixes": [[round(float(v), 4) for v in row] for row in mixes],
                       "seconds": round(time.perf_counter() - start, 3)}
        return LabelResult(counts, integer_counts(counts, total), diagnostics, warnings)

    def _simulation(self, tm: ThreatModel, session: Session) -> tuple[_Simulation, torch.Tensor, int]:
        """The simulated client on ``--per-class`` aux images per class (drawn with the session's seed), the classes
        without aux images, and how many images it uses."""
        aux = self.aux_of(session)
        if aux.labels is None:
            raise NotApplicable("client-fit: needs labelled auxiliary images (--aux-labels, or a 'labels' tensor)")
        c = tm.spec.num_classes
        labels = aux.labels.long().cpu()
        idx = aux_subset(labels, c, max(1, self.opt("per-class")), torch.Generator().manual_seed(session.seed))
        device = tm.device
        x = aux.images[idx].to(device)
        x = x if aux.normalized else normalize(x, tm.spec)
        y = labels[idx].to(device)
        per_class = torch.bincount(y, minlength=c).float()
        missing = (per_class == 0).cpu()
        if missing.all():
            raise NotApplicable("client-fit: no labelled aux image has a class in range")
        return _Simulation(tm, x, y, per_class.clamp_min(1), tm.meta.local_steps), missing.to(device), int(len(idx))

    def _initial_counts(self, tm: ThreatModel, session: Session, c: int) -> tuple[torch.Tensor, str]:
        """RLU's counts where ``--init rlu`` and RLU applies, else a uniform mix."""
        if self.opt("init") == "rlu":
            rlu = LABEL_METHODS.get("rlu")
            if not rlu.why_not(tm, session):
                return rlu().run(tm, session).counts_int.double(), "rlu"
        return torch.ones(c, dtype=torch.float64, device="cpu"), "uniform"


def step_spread(mixes: torch.Tensor, batch: int) -> torch.Tensor:
    """How far the per-step mixes [K, C] stray from their mean, in units of what batches of ``batch`` random draws
    from the mean mix would give: mean_k 2 B KL(pi_k || mean pi) / (C - 1), about 1 for such batches (the
    chi-square approximation of the multinomial's log-likelihood ratio)."""
    mean = mixes.mean(0, keepdim=True)
    kl = (mixes * (mixes.clamp_min(1e-12).log() - mean.clamp_min(1e-12).log())).sum(-1)
    return 2 * batch * kl.mean() / max(mixes.shape[-1] - 1, 1)


class _Simulation:
    """The simulated client's update as a differentiable function of its per-step class mixes."""

    def __init__(self, tm: ThreatModel, x: torch.Tensor, y: torch.Tensor, per_class: torch.Tensor, steps: int):
        self.tm, self.x, self.y, self.steps = tm, x, y, steps
        self.onehot_scaled = F.one_hot(y, len(per_class)).float() / per_class  # sample weight per unit of its class's mix
        params = dict(tm.model.named_parameters())
        self.names = [n for n in params if n in tm.gradient]
        self.start = {n: p.detach() for n, p in params.items()}
        self.buffers = {n: b.detach() for n, b in tm.model.named_buffers()}
        self.momentum, self.wd = optimizer_terms(tm.meta)
        self.lr = float(tm.meta.local_lr or 1.0)
        if steps == 1:  # the averaged gradient itself: no learning rate or optimiser needed
            self.target = {n: tm.gradient[n].detach().float().to(self.x.device) for n in self.names}
        else:
            self.target = {n: client_change(tm.meta, tm.gradient[n].to(self.x.device), self.start[n]).float()
                           for n in self.names}
        self.norm2 = sum(float((t ** 2).sum()) for t in self.target.values())
        if self.norm2 <= 0:
            raise NotApplicable("client-fit: the update is zero")

    def _gradient(self, theta: dict, mix: torch.Tensor) -> dict:
        buffers = {n: b.clone() for n, b in self.buffers.items()}  # train-mode BatchNorm updates them in place
        with differentiable_attention():  # differentiated twice (fedaudit/models/attention.py)
            out = functional_call(self.tm.model, {**self.start, **theta, **buffers}, (self.x,))
        loss = (F.cross_entropy(out, self.y, reduction="none") * (self.onehot_scaled @ mix)).sum()
        grads = torch.autograd.grad(loss, [theta[n] for n in self.names], create_graph=True)
        return dict(zip(self.names, grads))

    def loss(self, mixes: torch.Tensor) -> torch.Tensor:
        """|simulated - observed|^2 / |observed|^2 for mixes [K, C]."""
        theta = {n: self.start[n].clone().requires_grad_(True) for n in self.names}
        was_training = self.tm.model.training
        self.tm.model.train(self.tm.train_bn)
        devices = [self.x.device] if self.x.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # dropout (a model in train mode) draws the same masks each time
            torch.manual_seed(0)
            return self._loss(theta, mixes, was_training)

    def _loss(self, theta: dict, mixes: torch.Tensor, was_training: bool) -> torch.Tensor:
        try:
            if self.steps == 1:
                simulated = self._gradient(theta, mixes[0])
            else:
                velocity: dict = {}
                current = theta
                for k in range(self.steps):
                    g = self._gradient(current, mixes[k])
                    if self.wd:
                        g = {n: g[n] + self.wd * current[n] for n in self.names}
                    velocity = g if k == 0 or not self.momentum else {n: self.momentum * velocity[n] + g[n] for n in self.names}
                    current = {n: current[n] - self.lr * velocity[n] for n in self.names}
                simulated = {n: current[n] - theta[n] for n in self.names}
        finally:
            self.tm.model.train(was_training)
        return sum(((simulated[n] - self.target[n]) ** 2).sum() for n in self.names) / self.norm2
