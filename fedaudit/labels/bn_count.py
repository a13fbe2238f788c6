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
  warns (``auto`` then keeps its earlier route). Classes without
  aux samples get no samples (reported).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from fedaudit.channels import bn_statistics
from fedaudit.conversion import optimizer_terms, path_fractions
from fedaudit.errors import NotApplicable
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts, samples_in_update
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
                normalized: bool, model: nn.Module | None = None) -> torch.Tensor:
    """[N, J] per-sample moments of ``images`` at every BN layer's input (per channel: spatial mean of x, then of
    x^2), every BN layer normalising with the recovered batch statistics; ``model``: other weights than the
    checkpoint's (K > 1: a model along the update)."""
    model = copy.deepcopy(tm.model if model is None else model).eval()
    modules = dict(model.named_modules())
    dev = next(model.parameters()).device
    seen: dict[str, torch.Tensor] = {}

    def keep(name):
        def hook(module, inputs, output):
            x = inputs[0].detach().double()
            seen[name] = torch.cat([x.flatten(2).mean(2), x.pow(2).flatten(2).mean(2)], 1) if x.dim() > 2 \
                else torch.cat([x, x.pow(2)], 1)
        return hook

    hooks = []
    for name, s in stats.layers.items():
        bn = modules[name]
        assert isinstance(bn, nn.modules.batchnorm._BatchNorm)
        bn.running_mean.copy_(s.mean.to(bn.running_mean))  # type: ignore[union-attr]
        bn.running_var.copy_(s.var.to(bn.running_var))  # type: ignore[union-attr]
        hooks.append(bn.register_forward_hook(keep(name)))
    rows = []
    try:
        with torch.no_grad():
            for i in range(0, images.shape[0], CHUNK):
                x = images[i:i + CHUNK].to(dev)
                model(x if normalized else normalize(x, tm.spec))
                rows.append(torch.cat([seen[n] for n in stats.layers], 1).cpu())
    finally:
        for h in hooks:
            h.remove()
    return torch.cat(rows, 0)


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
    a = torch.cat([x.T, torch.full((1, x.shape[0]), weight, dtype=x.dtype)]).numpy()
    b = torch.cat([m, torch.tensor([weight], dtype=m.dtype)]).numpy()
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


# bn-count's class moments are means over the labelled aux images of each class; with fewer than this many in some
# class they are noisy enough that the gradient methods do better on trained models: bn-count warns and `auto` keeps
# the gradient route (docs/results/labels.md, "Smaller aux sets and another dataset")
MIN_AUX_PER_CLASS = 20
# K > 1: below this relative residual (and MIXTURE_MAX_CHANGE) the mixture's counts led the gradient methods on
# held-out BN ConvNet clients (docs/results/labels.md, "bn-count on FedAvg deltas"); above it bn-count warns
MIXTURE_MAX_RESIDUAL = 0.05
# ... and only where the model moved less than this share of its norm over the update (|delta| / |theta|): with
# momentum 0.9, or at random init, the residual stayed small on clients the counts got badly wrong
# (docs/results/labels.md, "bn-count on FedAvg deltas")
MIXTURE_MAX_CHANGE = 0.01


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
    summary = "counts from the BatchNorm batch statistics an upload with BN buffers carries (labelled aux)"
    paper = "fedaudit (docs/methods/labels.md)"
    requires = (BATCH_SIZE, BN_BUFFERS)
    aux = "required"
    options = (
        MethodOption("shrinkage", float, 0.1, "shrink the aux residuals' correlation towards the identity by this "
                     "much (0-1; 1 = no whitening)"),
        MethodOption("moments", str, "both", "which batch moments to match: both (means and second moments) or mean",
                     ("both", "mean")),
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

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
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
        feats = aux_moments(tm, stats, aux.images, aux.normalized, model)
        observed = batch_moments(stats)
        if self.opt("moments") == "mean":
            half = torch.cat([torch.arange(2 * s.mean.numel()) < s.mean.numel() for s in stats.layers.values()])
            feats, observed = feats[:, half], observed[half]
        c, b = tm.spec.num_classes, samples_in_update(tm)  # K > 1: the mixture read as one batch of B K
        labels = aux.labels.long()
        seen = [k for k in range(c) if bool((labels == k).any())]
        if len(seen) < 2:
            raise NotApplicable("bn-count needs labelled aux samples of at least two classes")
        design = torch.stack([feats[labels == k].mean(0) for k in seen])
        residuals = torch.cat([feats[labels == k] - design[i] for i, k in enumerate(seen)])
        x, m = whiten(design, observed, residuals, shrinkage)
        p = solve_proportions(x, m)
        start = integer_counts(p * b, b)
        n, moves = refine(start, x, m)
        counts = torch.zeros(c, dtype=torch.float64)
        counts_int = torch.zeros(c, dtype=torch.long)
        counts[seen] = p * b
        counts_int[seen] = n
        fit = float(((n.double() / b) @ x - m).norm() / m.norm())
        result = LabelResult(counts, counts_int, {
            "bn_layers": len(stats.layers), "moments": int(x.shape[1]), "shrinkage": shrinkage,
            "relative_residual": fit, "refine_moves": moves, "aux_classes": len(seen)})
        result.diagnostics["local_steps"] = stats.steps
        if not stats.exact:
            result.diagnostics["path_fraction"] = fraction
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
        fewest = fewest_per_class(labels)
        result.diagnostics["aux_fewest_per_class"] = fewest
        if fewest < MIN_AUX_PER_CLASS:
            result.warnings.append(f"a class has only {fewest} labelled aux images (fewer than {MIN_AUX_PER_CLASS}): "
                                   "bn-count's class moments are noisy, expect lower accuracy")
        return result

