"""bn-count: per-class counts from the BatchNorm batch statistics a one-step upload carries (fedaudit's own method;
docs/methods/labels.md, "bn-count").

An upload that ships BN buffers (a FedAvg delta or weights upload, Flower's state_dict, or a gradient with
``capture --include-buffers``) reveals, after one local step, every BN layer's exact batch mean and biased variance
(fedaudit/channels/bn_statistics.py). Both are batch means of per-sample quantities: with u_i and v_i the per-channel
spatial means of x and x^2 at a BN layer's input,

    mean = (1/B) sum_i u_i,    var + mean^2 = (1/B) sum_i v_i.

Replacing each sample by its class's expectation makes every moment linear in the counts n: B m = sum_c n_c a_c + e,
a_c the mean of [u, v] over the labelled aux samples of class c. The output layer says little about how many *sure*
samples a class has (their gradient is near zero; docs/results/labels.md, "Many classes"), but a sure sample moves
the BN statistics as much as any other, which is why this works on trained models where the gradient methods do not.

Choices (each an option where it is one):
* The aux images run through the checkpoint with every BN layer normalising with the *recovered* batch statistics
  (eval mode, running statistics set to them): a sample's features inside the client's batch depend on the batch
  only through those statistics, so the aux features are those the aux samples would have had in that batch.
* Generalised least squares: equations standardised by the aux residuals' per-moment spread, whitened by their
  correlation shrunk towards the identity (``--shrinkage``, applied through the residuals' SVD, so there may be more
  moments than aux samples). Without the whitening (``--shrinkage 1``) the thousands of strongly correlated moments
  count as independent and the counts fall by 10-20 points (docs/results/labels.md).
* Proportions on the simplex by non-negative least squares, then integer counts (largest remainders), then single
  sample moves between classes while they lower the objective.
* ``--moments both`` (default): means and second moments; ``mean``: the batch means alone.
* K > 1 local steps: the buffers hold a momentum-weighted mixture of the K batches' statistics
  (fedaudit/channels/bn_statistics.py), each batch normalised with its own statistics under moving weights. The
  mixture is read as one batch of B K samples, the aux moments taken at one model on the straight path of the update:
  by default (``--path-fraction mixture``) where the mixture's batches were on average (each step's position under
  the recorded momentum, weighted by the batch's share in the buffers), 1.7 +- 0.6 points ahead of halfway on
  held-out clients. It reads trained clients that moved little well (88% on 29 held-out ConvNet clients) and
  collapses where the model moves far or is untrained (docs/results/labels.md, "bn-count on FedAvg deltas"). Above
  a relative residual of MIXTURE_MAX_RESIDUAL, or where the model moved MIXTURE_MAX_CHANGE of its norm or more, it
  warns (``auto`` then keeps its earlier route). ``--aux-batches``: each client batch was normalised with its own
  statistics, not the mixture's; ``mixture`` runs the aux images in eval mode under the mixture's
  statistics, ``simulated`` in train-mode batches of the client's B (the aux set split at random), ``matched``
  each aux sample in a batch of B whose other members come in the class shares of the simulated reading
  (one forward pass of B images per aux sample: ``matched_batches``); ``by-steps`` (default) matched from
  MATCHED_MIN_STEPS local steps, mixture below. Small
  batches read better simulated, skewed large ones matched or mixture; matched was within 1-3 points of the better
  at K = 4 and 8, and ``auto`` with it gained on held-out clients there, but lost 3 points at K = 2
  (docs/results/labels.md, "bn-count's aux images in simulated batches"). Classes without aux samples get no samples (reported).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from fedaudit.channels import bn_statistics
from fedaudit.conversion import optimizer_terms, path_fractions
from fedaudit.errors import NotApplicable
from fedaudit.labels.auto_routes.calibration import MIN_AUX_PER_CLASS, MIXTURE_MAX_CHANGE, MIXTURE_MAX_RESIDUAL
from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts, samples_in_update
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.models.normalize import normalize
from fedaudit.requirements import BATCH_SIZE, Requirement
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel

CHUNK = 256

def _readable_bn(tm: ThreatModel) -> str | None:
    """None when the update carries the BN buffers and every BN layer keeps running statistics (a layer that does
    not normalises every forward with its own batch, which the aux pass could not reproduce)."""
    untracked = [n for n, mod in tm.model.named_modules()
                 if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.running_mean is None]
    if untracked:
        return f"BatchNorm layer {untracked[0]!r} keeps no running statistics"
    return bn_statistics.why_not(tm)


BN_BUFFERS = Requirement("bn_buffers", "the client's BatchNorm buffers after its local step, every BN layer tracked",
                         _readable_bn)


def aux_moments(tm: ThreatModel, stats: bn_statistics.BNStatistics, images: torch.Tensor,
                normalized: bool, model: nn.Module | None = None, batches: list[torch.Tensor] | None = None,
                first_only: bool = False) -> torch.Tensor:
    """[N', J] per-sample moments of ``images`` at every BN layer's input (per channel: spatial mean of x, then of
    x^2), every BN layer normalising with the recovered batch statistics; ``model``: other weights than the
    checkpoint's (K > 1: a model along the update). ``batches`` (index tensors of one size): instead, every BN layer
    normalises each of these simulated client batches with its own batch statistics (many batches per forward
    pass, ``_grouped_bn``); the rows are their members in order, or (``first_only``) each batch's first member."""
    model = copy.deepcopy(tm.model if model is None else model).eval()
    modules = dict(model.named_modules())
    dev = next(model.parameters()).device
    seen: dict[str, torch.Tensor] = {}
    size = 1 if batches is None else len(batches[0])
    if batches is None:
        chunks = list(torch.arange(images.shape[0], device="cpu").split(CHUNK))
    else:
        assert all(len(b) == size for b in batches)
        groups = max(1, 4 * CHUNK // size)  # batches per forward pass
        chunks = [torch.cat(batches[i:i + groups]) for i in range(0, len(batches), groups)]

    def keep(name):
        def hook(module, inputs, output):
            x = inputs[0].detach()
            if first_only:
                x = x[::size]
            if x.dim() > 2:  # spatial means in the input's precision (float32: ~1e-7 relative), the rest in float64
                seen[name] = torch.cat([x.flatten(2).mean(2), x.pow(2).flatten(2).mean(2)], 1).double()
            else:
                x = x.double()
                seen[name] = torch.cat([x, x.pow(2)], 1)
        return hook

    hooks = []
    for name, s in stats.layers.items():
        bn = modules[name]
        assert isinstance(bn, nn.modules.batchnorm._BatchNorm)
        bn.running_mean.copy_(s.mean.to(bn.running_mean))  # type: ignore[union-attr]
        bn.running_var.copy_(s.var.to(bn.running_var))  # type: ignore[union-attr]
        if batches is not None:
            bn.forward = _grouped_bn(bn, size)  # type: ignore[method-assign]
        hooks.append(bn.register_forward_hook(keep(name)))
    rows = []
    try:
        with torch.no_grad():
            for idx in chunks:
                x = images[idx].to(dev)
                model(x if normalized else normalize(x, tm.spec))
                rows.append(torch.cat([seen[n] for n in stats.layers], 1).cpu())
    finally:
        for h in hooks:
            h.remove()
    return torch.cat(rows, 0)


def _grouped_bn(bn: nn.modules.batchnorm._BatchNorm, size: int):
    """A forward for ``bn`` that normalises every consecutive group of ``size`` samples with that group's own batch
    mean and biased variance (train-mode BatchNorm of each simulated batch), then applies the affine map: the groups
    are laid side by side as channels of their own, [groups size, C, ...] -> [size, groups C, ...], so that one
    train-mode ``F.batch_norm`` (with the affine parameters tiled) normalises each by its own statistics."""
    def forward(x: torch.Tensor) -> torch.Tensor:
        groups, rest = x.shape[0] // size, x.shape[1:]
        side = x.view(groups, size, *rest).transpose(0, 1).reshape(size, groups * rest[0], *rest[1:])
        weight = bn.weight.repeat(groups) if bn.affine else None
        bias = bn.bias.repeat(groups) if bn.affine else None
        y = F.batch_norm(side, None, None, weight, bias, training=True, eps=bn.eps)
        return y.view(size, groups, *rest).transpose(0, 1).reshape(x.shape)
    return forward


def split_batches(n: int, batch: int, rounds: int, g: torch.Generator) -> list[torch.Tensor]:
    """``rounds`` random splits of n samples into batches of ``batch`` (each split leaves its remainder out; a batch
    larger than n is all n)."""
    batch = min(batch, n)
    return [b for _ in range(rounds) for b in torch.randperm(n, generator=g, device="cpu").split(batch) if len(b) == batch]


def matched_batches(labels: torch.Tensor, batch: int, shares: torch.Tensor, g: torch.Generator) -> list[torch.Tensor]:
    """One batch per aux sample i: i first, then ``batch`` - 1 batch-mates drawn with replacement so that their
    classes come in ``shares`` (i among them now and then: with hundreds of samples it rarely matters).
    Each sample gets a batch of its own (B forward rows per sample): batches shared by several kept samples were far
    cheaper but make a class's rows share a few batches' statistics, and were not measured as widely
    (docs/results/labels.md, "bn-count's aux images in simulated batches")."""
    per_class = torch.bincount(labels, minlength=shares.numel()).double()
    weight = shares.double()[labels] / per_class[labels].clamp_min(1)
    mates = torch.multinomial(weight, (batch - 1) * labels.numel(), replacement=True, generator=g)
    return [torch.cat([torch.tensor([i], device=m.device), m]) for i, m in enumerate(mates.view(labels.numel(), batch - 1))]


def batch_moments(stats: bn_statistics.BNStatistics) -> torch.Tensor:
    """[J] the client batch's moments in the order of ``aux_moments``: per layer, the means then the second moments."""
    return torch.cat([torch.cat([s.mean, s.var + s.mean ** 2]) for s in stats.layers.values()]).double().cpu()


def whiten(design: torch.Tensor, observed: torch.Tensor, residuals: torch.Tensor, shrinkage: float):
    """``design`` [C, J] and ``observed`` [J] standardised by the residuals' spread and multiplied by the inverse
    square root of their correlation shrunk towards the identity: (1 - s) R + s I, through the residuals' SVD."""
    sd = residuals.std(0)
    keep = sd > 1e-12 * float(sd.max())  # constant moments (dead channels) carry nothing
    design, observed, residuals, sd = design[:, keep], observed[keep], residuals[:, keep], sd[keep]
    z = residuals / sd / max(residuals.shape[0] - 1, 1) ** 0.5
    x, m = design / sd, observed / sd
    if shrinkage >= 1:
        return x, m
    _, sig, vt = torch.linalg.svd(z, full_matrices=False)
    scale = ((1 - shrinkage) * sig ** 2 + shrinkage).rsqrt() - shrinkage ** -0.5

    def apply(a: torch.Tensor) -> torch.Tensor:  # S^(-1/2) a = a / sqrt(s) + V (diag(scale)) V^T a
        return a * shrinkage ** -0.5 + (a @ vt.T) * scale @ vt

    return apply(x), apply(m)


def solve_proportions(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """p >= 0, sum p = 1, minimising ||x^T p - m||^2 (the sum as a heavily weighted extra row)."""
    import scipy.optimize  # here, not at module level: it costs every command's start-up

    weight = 1e3 * float(x.norm())
    a = torch.cat([x.T, torch.full((1, x.shape[0]), weight, dtype=x.dtype, device=x.device)]).numpy()
    b = torch.cat([m, torch.tensor([weight], dtype=m.dtype, device=m.device)]).numpy()
    p, _ = scipy.optimize.nnls(a, b, maxiter=50 * a.shape[1])
    p = torch.from_numpy(p)
    return p / p.sum() if float(p.sum()) > 0 else torch.full_like(p, 1 / len(p))


def refine(counts: torch.Tensor, x: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Move one sample between two classes while that lowers ||x^T (n / B) - m||^2; returns the counts and the moves."""
    total = int(counts.sum())
    n = counts.clone()

    def cost(v: torch.Tensor) -> float:
        return float(((v.double() / total) @ x - m).pow(2).sum())

    best, moves = cost(n), 0
    while moves < 10 * total:
        found = None
        for a in torch.nonzero(n > 0).flatten().tolist():
            for b in range(len(n)):
                if a == b:
                    continue
                n[a] -= 1
                n[b] += 1
                c = cost(n)
                if c < best - 1e-12 * max(best, 1.0) and (found is None or c < found[0]):
                    found = (c, a, b)
                n[a] += 1
                n[b] -= 1
        if found is None:
            break
        best, a, b = found
        n[a] -= 1
        n[b] += 1
        moves += 1
    return n, moves


# --aux-batches by-steps (default): matched from this many local steps, the mixture's statistics below. Matched
# gained at K = 4 and 8 on held-out clients and lost at K = 2 on two sets of clients (set 4, B = 24: -3.5 points on 12;
# K = 2, B 8/32: -3.0 +- 1.3 on 16); K = 3 is not measured and keeps the earlier reading (docs/results/labels.md,
# "bn-count's aux images in simulated batches")
MATCHED_MIN_STEPS = 4
# K > 1, --aux-batches simulated: how many random splits of the aux set into batches of B give the class moments
AUX_ROUNDS = 4


@dataclass
class MomentSystem:
    """bn-count's whitened system: ``x`` [classes seen, J] the aux classes' moments, ``m`` [J] the client's, both
    whitened; the counts n of ``samples`` samples solve x^T (n / samples) = m."""
    x: torch.Tensor
    m: torch.Tensor
    seen: list[int]
    samples: int
    stats: bn_statistics.BNStatistics
    fraction: float
    aux_batches: str  # how the aux images were normalised (--aux-batches; "mixture" wherever the stats are exact)

    def residual(self, counts: torch.Tensor) -> float:
        """How far the counts (all classes, any total) leave the moments: ||x^T p - m|| / ||m||, p their shares."""
        shares = counts.double()[self.seen] / max(float(counts.double().sum()), 1e-12)
        return float((shares @ self.x - self.m).norm() / self.m.norm())




def mixture_doubts(residual: float, change: float | None) -> list[str]:
    """Why a K > 1 reading of the BN mixture is not to be trusted (empty: both checks pass): a relative residual of
    MIXTURE_MAX_RESIDUAL or more, or a model change of MIXTURE_MAX_CHANGE or more (or none known)."""
    doubts = []
    if residual >= MIXTURE_MAX_RESIDUAL:
        doubts.append(f"relative residual {residual:.3f} >= {MIXTURE_MAX_RESIDUAL}")
    if change is None or change >= MIXTURE_MAX_CHANGE:
        doubts.append("no final model" if change is None else f"the model moved {change:.4f} >= {MIXTURE_MAX_CHANGE}")
    return doubts


def too_few_aux(session: Session) -> str | None:
    """Why bn-count's class moments are too noisy to route to (fewer than MIN_AUX_PER_CLASS labelled aux images in a
    class), or None (enough, or no labelled aux at all)."""
    aux = session.aux
    if aux is None or aux.labels is None or fewest_per_class(aux.labels) >= MIN_AUX_PER_CLASS:
        return None
    return f"fewer than {MIN_AUX_PER_CLASS} labelled aux images in a class"


def fewest_per_class(labels: torch.Tensor) -> int:
    """The smallest number of aux samples in any class the aux set has at all."""
    per_class = torch.bincount(labels.long())
    return int(per_class[per_class > 0].min())


@LABEL_METHODS.register
class BNCount(LabelMethod):
    name = "bn-count"
    multi_step_aware = True
    summary = "counts from the BatchNorm batch statistics an upload with BN buffers carries (labelled aux)"
    paper = "fedaudit (docs/methods/labels.md)"
    requires = (BATCH_SIZE, BN_BUFFERS)
    aux = "required"
    options = (
        MethodOption("shrinkage", float, 0.1, "shrink the aux residuals' correlation towards the identity by this "
                     "much (0-1; 1 = no whitening)"),
        MethodOption("moments", str, "both", "which batch moments to match: both (means and second moments) or mean",
                     ("both", "mean")),
        MethodOption("aux-batches", str, "by-steps", "K > 1: how the aux images are normalised: matched (each in a "
                     "train-mode batch of the client's B whose other members come in the class shares of the "
                     "simulated reading), simulated (the aux set split at random into such batches, AUX_ROUNDS times), "
                     "mixture (with the buffers' mixture statistics, as one step's exact ones) or by-steps (matched "
                     f"from K = {MATCHED_MIN_STEPS} local steps, mixture below)",
                     ("by-steps", "matched", "simulated", "mixture")),
        MethodOption("path-fraction", str, "mixture", "K > 1: where along the update the aux moments are taken: "
                     "mixture (where the buffers' batches were, on average, under the recorded momentum) or a "
                     "fraction from 0 (the global model) to 1 (the client's final one)"),
    )

    @classmethod
    def why_not(cls, tm: ThreatModel, session: Session | None = None) -> list[str]:
        reasons = super().why_not(tm, session)
        if session is not None and session.aux is not None and session.aux.kind == "images" \
                and session.aux.labels is None:
            reasons.append("needs labelled auxiliary images (--aux-labels, or a 'labels' tensor)")
        return reasons

    def _fraction(self, tm: ThreatModel, stats: bn_statistics.BNStatistics) -> float:
        """Where along the update the aux moments are taken for a K-batch mixture: ``--path-fraction mixture`` (default)
        the mean, under the mixture's weights, of where each local step's model is on the straight path when every
        step's gradient is the same (heavy-ball momentum: later steps travel further; fedaudit/conversion.py)."""
        text = str(self.opt("path-fraction"))
        if text == "mixture":
            momentum, _ = optimizer_terms(tm.meta)
            where = path_fractions(stats.steps, momentum)
            return sum(w * f for w, f in zip(stats.weights, where)) / sum(stats.weights)
        try:
            fraction = float(text)
        except ValueError:
            fraction = -1.0
        if not 0 <= fraction <= 1:
            raise ValueError(f"bn-count: --path-fraction must be 'mixture' or a number in [0, 1], got {text!r}")
        return fraction

    def system(self, tm: ThreatModel, session: Session) -> "MomentSystem":
        """The whitened linear system the counts solve, with the aux moments as ``--aux-batches`` says."""
        shrinkage = float(self.opt("shrinkage"))
        if not 0 < shrinkage <= 1:
            raise ValueError(f"bn-count: --shrinkage must be in (0, 1], got {shrinkage}")
        aux = self.aux_of(session)
        if aux.labels is None:
            raise NotApplicable("bn-count needs labelled auxiliary images")
        stats = bn_statistics.recover(tm)
        # a gradient upload reveals no final model: the global one stands for the whole path
        fraction = 0.0 if stats.exact or tm.meta.kind == "gradient" else self._fraction(tm, stats)
        model = tm.model if fraction == 0 else tm.model_along_update(fraction)
        labels = aux.labels.long()
        how = "mixture" if stats.exact or (tm.batch_size or 1) < 2 else str(self.opt("aux-batches"))
        if how == "by-steps":
            how = "matched" if tm.meta.local_steps >= MATCHED_MIN_STEPS else "mixture"
        if how == "mixture":
            feats = aux_moments(tm, stats, aux.images, aux.normalized, model)
        else:  # each aux sample normalised by a simulated batch, as each client sample was by its own step's batch
            g = torch.Generator().manual_seed(session.seed if session.seed is not None else 0)
            b = min(tm.batch_size or 1, labels.numel())
            batches = split_batches(labels.numel(), b, AUX_ROUNDS, g)
            feats = aux_moments(tm, stats, aux.images, aux.normalized, model, batches)
            split_labels = labels[torch.cat(batches)]
            if how == "simulated":
                return self._system(tm, stats, fraction, feats, split_labels, how)
            # matched: batches composed like the client by the simulated reading (a sample of each class added)
            first = self._solve(tm, self._system(tm, stats, fraction, feats, split_labels, "simulated"))
            shares = (first.counts_int.double() + 0.5) / (first.counts_int.double() + 0.5).sum()
            feats = aux_moments(tm, stats, aux.images, aux.normalized, model,
                                matched_batches(labels, b, shares, g), first_only=True)
        return self._system(tm, stats, fraction, feats, labels, how)

    def _system(self, tm: ThreatModel, stats: bn_statistics.BNStatistics, fraction: float, feats: torch.Tensor,
                labels: torch.Tensor, how: str) -> "MomentSystem":
        shrinkage = float(self.opt("shrinkage"))
        observed = batch_moments(stats)
        if self.opt("moments") == "mean":
            half = torch.cat([torch.arange(2 * s.mean.numel(), device="cpu") < s.mean.numel() for s in stats.layers.values()])
            feats, observed = feats[:, half], observed[half]
        seen = [k for k in range(tm.spec.num_classes) if bool((labels == k).any())]
        if len(seen) < 2:
            raise NotApplicable("bn-count needs labelled aux samples of at least two classes")
        design = torch.stack([feats[labels == k].mean(0) for k in seen])
        residuals = torch.cat([feats[labels == k] - design[i] for i, k in enumerate(seen)])
        x, m = whiten(design, observed, residuals, shrinkage)
        return MomentSystem(x, m, seen, samples_in_update(tm), stats, fraction, how)

    def _solve(self, tm: ThreatModel, system: "MomentSystem") -> LabelResult:
        """The counts that solve ``system``: proportions on the simplex, integer counts, single-sample moves."""
        x, m, seen, b = system.x, system.m, system.seen, system.samples  # K > 1: the mixture read as one batch of B K
        p = solve_proportions(x, m)
        n, moves = refine(integer_counts(p * b, b), x, m)
        counts = torch.zeros(tm.spec.num_classes, dtype=torch.float64, device="cpu")
        counts_int = torch.zeros(tm.spec.num_classes, dtype=torch.long, device="cpu")
        counts[seen] = p * b
        counts_int[seen] = n
        return LabelResult(counts, counts_int, {
            "bn_layers": len(system.stats.layers), "moments": int(x.shape[1]), "shrinkage": float(self.opt("shrinkage")),
            "relative_residual": system.residual(counts_int), "refine_moves": moves, "aux_classes": len(seen)})

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        system = self.system(tm, session)
        stats, seen, c = system.stats, system.seen, tm.spec.num_classes
        result = self._solve(tm, system)
        fit = result.diagnostics["relative_residual"]
        result.diagnostics["local_steps"] = stats.steps
        if not stats.exact:
            result.diagnostics["aux_batches"] = system.aux_batches
            result.diagnostics["path_fraction"] = system.fraction
            change = tm.relative_change()
            result.diagnostics["relative_change"] = change
            result.diagnostics["mixture_doubts"] = mixture_doubts(fit, change)
            if fit >= MIXTURE_MAX_RESIDUAL:
                result.warnings.append(f"the BN buffers mix {stats.steps} local batches and the counts explain them "
                                       f"only to a relative residual of {fit:.2f}: the model moved too far for this "
                                       "reading")
            elif change is not None and change >= MIXTURE_MAX_CHANGE:
                result.warnings.append(f"the BN buffers mix {stats.steps} local batches and the model moved "
                                       f"{change:.3f} of its norm: on such clients the counts were often wrong even "
                                       "where they explain the buffers")
        if len(seen) < c:
            result.warnings.append(f"{c - len(seen)} classes have no aux sample and get no samples")
        aux_labels = self.aux_of(session).labels
        assert aux_labels is not None  # system() refused unlabelled aux
        fewest = fewest_per_class(aux_labels.long())
        result.diagnostics["aux_fewest_per_class"] = fewest
        if fewest < MIN_AUX_PER_CLASS:
            result.warnings.append(f"a class has only {fewest} labelled aux images (fewer than {MIN_AUX_PER_CLASS}): "
                                   "bn-count's class moments are noisy, expect lower accuracy")
        return result

