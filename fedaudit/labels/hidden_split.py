"""hidden-split (fedaudit's own method): split a hidden linear layer's update into its samples, B >= C included.

Why. The output layer's update has rank at most C - 1, so for B >= C it cannot be split into samples (sample-split
stops there) and the count methods read per-class error masses, which on trained models say little about how many
samples made them (docs/results/labels.md). A hidden linear layer wider than the batch keeps every sample apart.

Model (mean-reduced cross-entropy, one step). A hidden ``nn.Linear`` L with input x_n (x~_n = [x_n; 1]) and output
z_n = W~_L x~_n, followed by a chain T of ReLU and Linear layers ending in the output layer (logits T(z_n)):

    B G~_L = sum_n d_n x~_n^T,   d_n = J_T(z_n)^T (p_n - onehot(y_n)),   p_n = softmax(T(z_n))          (1)

G~_L = U S V^T has rank B: every x~_n lies in span(V), every d_n in span(U). Subtracting one sample's term lowers the
rank by exactly one, and for a rank-one term d x~^T of a rank-B matrix that holds iff

    d in span(U),   x~ in span(V),   x~^T V S^-1 U^T d = 1                                                (2)

With d = d(x, c), (1)'s d for input x and label c, a candidate input and label are *verified* by (2) sample by
sample, with no fit of the others: span(U) alone gives m - B equations per sample for B unknowns.

Finding candidates. L's input is a ReLU output: >= 0 with exact zeros at the inactive units, and x~ ends in 1, so
each x~_n lies in the polytope P = {x~ in span(V): x >= 0, x~_last = 1}, at a vertex where it has about B - 1
inactive units of its own. Each LP round minimises, over P (bounded by twice the largest aux input), the mass on
the units one aux image leaves inactive, one LP per aux image (``--candidates``). Each vertex is checked with
every label: the update minus its term must keep no more than ``--tolerance`` times the noise floor in its B-th
singular value (the floor: the update's first singular value beyond B, at least 1e-7 of its largest). Verified
samples are subtracted (peeled) and the LP rounds repeat on the smaller update, whose polytope has fewer
dimensions, until one verifies nothing. Then, where at most FIT_MAX_RANK visible samples are left, fitted rounds
minimise (2) over each candidate's coordinates in the peeled update's row space by Adam (``--fit-steps``), from aux
inputs, for the samples with too few inactive units of their own to be a vertex. Verified labels are exact up to the client's float32 rounding (measured:
docs/results/labels.md, "hidden-split").

Samples the model is sure of to float32 precision leave terms below the noise floor: the split covers the
*visible* rank only (``diagnostics.visible_rank``). Samples left over (invisible, or not found) take the verified
samples' class mix (``--leftover resolved``, the default: most are sure samples of the classes the visible ones
show) or bias-count's rule on what the verified samples leave of the output bias gradient (``--leftover bias``);
``diagnostics`` gives ``exact_counts`` and ``fallback_counts`` apart.

Not applicable: local steps K > 1 (the model moves between steps), no hidden linear layer whose gradient the update
shares with more outputs and inputs than B, layers after it that are not a chain of ReLU and Linear layers (checked
by recomputing the aux images' logits through the chain), inputs that are not ReLU outputs.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from scipy.optimize import linprog
from torch import nn

from fedaudit.errors import NotApplicable
from fedaudit.labels.base import LabelMethod, LabelResult, affine_rows, integer_counts, samples_in_update
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.models.head import forward_detached, output_layer_io
from fedaudit.models.normalize import normalize
from fedaudit.progress import advance
from fedaudit.requirements import BATCH_SIZE, SINGLE_STEP
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel

TAIL_MODULES = (nn.ReLU, nn.Linear, nn.Identity, nn.Flatten)
# between the ReLU and the split layer: modules that keep its outputs >= 0 with exact zeros
PASS_THROUGH = (nn.Flatten, nn.Identity, nn.MaxPool1d, nn.MaxPool2d, nn.AdaptiveMaxPool2d)
NOISE_FLOOR = 1e-7  # float32 rounding of the client's gradient, relative to its largest singular value
PREFILTER = 1e-2  # candidates whose best label scores (2) above this are not checked by the SVD
# a candidate within this relative distance of a peeled sample's inputs, or whose active inputs differ from its in at
# most this share, is that sample again (peeling leaves its rounding behind, which can pass the check once more)
SAME = 0.05
FIT_LR = 0.02
FIT_MAX_RANK = 8  # fitted rounds run where at most this many visible samples are left


def _leaf_order(model: nn.Module, sample: torch.Tensor, train_bn: bool) -> list[str]:
    """Names of the leaf modules in the order one forward pass calls them."""
    order: list[str] = []
    hooks = [m.register_forward_hook(lambda mod, i, o, name=name: order.append(name))
             for name, m in model.named_modules() if not list(m.children())]
    try:
        forward_detached(model, torch.cat([sample, sample]), train_bn)  # two samples: a train-mode BatchNorm needs them
    finally:
        for h in hooks:
            h.remove()
    return order


def split_layers(tm: ThreatModel, sample: torch.Tensor) -> list[tuple[str, list[str]]]:
    """Hidden linear layers fed by a ReLU (through PASS_THROUGH modules) whose output reaches the logits through a chain
    of TAIL_MODULES, nearest the output first, each with its chain's module names (the output layer last)."""
    final = tm.final_layer
    if final is None:
        return []
    modules = dict(tm.model.named_modules())
    order = _leaf_order(tm.model, sample, tm.train_bn)
    if final not in order or order[-1] != final:
        return []
    found = []
    for i in range(len(order) - 2, -1, -1):
        name = order[i]
        chain = order[i + 1:]
        if not all(isinstance(modules[n], TAIL_MODULES) for n in chain):
            break
        before = [modules[n] for n in reversed(order[:i])]
        fed = next((m for m in before if not isinstance(m, PASS_THROUGH)), None)
        if isinstance(modules[name], nn.Linear) and order.count(name) == 1 and isinstance(fed, nn.ReLU):
            found.append((name, chain))
    return found


def _tail(modules: list[nn.Module]) -> nn.Module:
    """The chain after the split layer, a float64 copy (the model stays as it is), without gradients."""
    return nn.Sequential(*[copy.deepcopy(m) for m in modules]).double().requires_grad_(False)


def _candidate_inputs(v: np.ndarray, patterns: np.ndarray, cap: float, gen: np.random.Generator) -> np.ndarray:
    """Vertices of P = {V a >= 0, (V a)_last = 1, V a <= cap}, one LP per aux zero pattern (plus a little noise)."""
    m, r = v.shape
    a_ub = np.concatenate([-v[:-1], v[:-1]])
    b_ub = np.concatenate([np.zeros(m - 1), np.full(m - 1, cap)])
    out = []
    for pattern in patterns:
        w = np.concatenate([pattern + 0.01 * gen.random(m - 1), [0.0]])
        res = linprog(v.T @ w, A_ub=a_ub, b_ub=b_ub, A_eq=v[-1][None], b_eq=[1.0], bounds=[(None, None)] * r,
                      method="highs")
        if res.status == 0:
            out.append(v @ res.x)
    return np.unique(np.round(np.array(out), 9), axis=0) if out else np.zeros((0, m))


@LABEL_METHODS.register
class HiddenSplit(LabelMethod):
    name = "hidden-split"
    summary = "split a hidden linear layer's update into its samples (exact labels for B >= C, up to its width)"
    paper = "fedaudit's own (docs/methods/labels.md, hidden-split)"
    requires = (BATCH_SIZE, SINGLE_STEP)
    aux = "required"
    options = (
        MethodOption("layer", str, "auto", "the hidden nn.Linear to split (auto: each that fits, the one that verifies "
                     "the most samples kept)"),
        MethodOption("candidates", int, 500, "linear programs (and fitted starts) per round, one per aux image",
                     positive=True),
        MethodOption("tolerance", float, 30.0, "a verified sample leaves the update's rank at most this times its "
                     "noise floor", positive=True),
        MethodOption("rounds", int, 20, "peeling rounds at most", positive=True),
        MethodOption("fit-steps", int, 300, "Adam steps of a fitted round (after the LP rounds; 0: none)"),
        MethodOption("leftover", str, "resolved", "samples left unresolved take the resolved ones' class mix "
                     "(resolved) or bias-count's rule on the rest of the bias gradient (bias)", ("resolved", "bias")),
    )

    @classmethod
    def why_not(cls, tm: ThreatModel, session: Session | None = None) -> list[str]:
        reasons = super().why_not(tm, session)
        if reasons or tm.final_layer is None:
            return reasons or ["needs a linear output layer"]
        if tm.final_bias_grad is None:
            reasons.append("needs the output layer's bias gradient (the leftover samples are counted from it)")
        if session is not None and session.aux is not None and not reasons:
            try:
                cls._layers(tm, session, "auto")
            except NotApplicable as exc:
                reasons.append(str(exc))
        return reasons

    @staticmethod
    def _layers(tm: ThreatModel, session: Session, wanted: str) -> list[tuple[str, list[str]]]:
        aux = session.aux
        assert aux is not None
        sample = aux.images[:1] if aux.normalized else normalize(aux.images[:1], tm.spec)
        layers = split_layers(tm, sample.to(tm.device))
        b = samples_in_update(tm)
        modules = dict(tm.model.named_modules())
        fits = []
        for name, chain in layers:
            layer = modules[name]
            if wanted not in ("auto", name):
                continue
            if layer.bias is None or tm.grad(f"{name}.weight") is None or tm.grad(f"{name}.bias") is None:
                continue
            if layer.out_features <= b or layer.in_features + 1 <= b:
                continue
            fits.append((name, chain))
        if not fits:
            raise NotApplicable(
                f"needs a hidden nn.Linear (with bias, its gradient in the update, wider than the batch of {b}) "
                "fed by a ReLU and followed only by ReLU and Linear layers up to the output layer"
                + (f"; {wanted!r} is not one" if wanted != "auto" else ""))
        return fits

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        b, c = samples_in_update(tm), tm.spec.num_classes
        aux = self.aux_of(session)
        logits = output_layer_io(tm.model, tm.spec, tm.output_layer, aux.images, tm.train_bn, aux.normalized)[1].cpu()
        # every layer that fits, nearest the output first; the one that verifies the most samples is kept (which
        # layer has enough inactive inputs per sample is not known beforehand: on Flower's CNN at B = 32 the
        # 120 -> 84 layer verified none, the 400 -> 120 one 18; docs/results/labels.md, "hidden-split")
        tried: dict[str, int] = {}
        best: tuple[str, _Peel, torch.Tensor] | None = None
        reasons = []
        for name, chain in self._layers(tm, session, self.opt("layer")):
            try:
                peel, logits_aux = self._split(tm, session, name, chain, logits)
            except NotApplicable as exc:
                reasons.append(str(exc))
                continue
            tried[name] = len(peel.labels)
            if best is None or len(peel.labels) > len(best[1].labels):
                best = (name, peel, logits_aux)
            if peel.rank == 0:
                break
        if best is None:
            raise NotApplicable("; ".join(reasons))
        name, peel, logits_aux = best
        exact = torch.bincount(torch.tensor(peel.labels, dtype=torch.long, device="cpu"), minlength=c)
        left = b - len(peel.labels)
        raw = torch.zeros(c, dtype=torch.float64, device="cpu")
        if left and self.opt("leftover") == "resolved" and peel.labels:
            # samples left over take the resolved samples' class mix: most are samples the model is sure of,
            # invisible in the update, and a class's share of the visible ones is the best guess of theirs
            raw = exact.double() * left / len(peel.labels)
        elif left:
            # bias-count's rule on what the verified samples leave of the output bias gradient
            verified = sum(peel.probs, torch.zeros(c, dtype=torch.float64, device="cpu")) \
                - torch.bincount(torch.tensor(peel.labels, dtype=torch.long, device="cpu"), minlength=c).double()  # sum of p - e_y
            errors = tm.output_grad("bias").double().cpu() * b - verified
            raw = (left * torch.softmax(logits_aux, -1).mean(0) - errors).clamp_min(0)
            raw = raw * left / max(float(raw.sum()), 1e-12)
        fallback = integer_counts(raw, left) if left else torch.zeros(c, dtype=torch.long, device="cpu")
        return LabelResult(exact.double() + raw, exact + fallback, {
            "layer": name, "layers_tried": tried, "resolved": len(peel.labels), "visible_rank": peel.visible,
            "unresolved": left, "rounds": peel.rounds, "noise_growth": peel.growth, "exact_counts": exact.tolist(),
            "fallback_counts": fallback.tolist(),
            "aux": aux.kind})

    def _split(self, tm: ThreatModel, session: Session, name: str, chain: list[str],
               logits: torch.Tensor) -> tuple[_Peel, torch.Tensor]:
        """The LP and fitted rounds at layer ``name``: the peeled update and the aux images' logits via the chain."""
        b = samples_in_update(tm)
        aux = self.aux_of(session)
        modules = dict(tm.model.named_modules())
        layer = modules[name]
        w_aug = torch.cat([layer.weight.detach(), layer.bias.detach()[:, None]], 1).double().cpu()
        tail = _tail([modules[n] for n in chain]).cpu()
        m = torch.cat([tm.shared_grad(f"{name}.weight").flatten(1), tm.shared_grad(f"{name}.bias")[:, None]],
                      1).double().cpu() * b  # (1): sum_n d_n x~_n^T
        x_aux, z_aux = (t.cpu() for t in output_layer_io(tm.model, tm.spec, name, aux.images, tm.train_bn,
                                                           aux.normalized))
        if float(x_aux.min()) < 0 or not bool((x_aux == 0).any()):
            raise NotApplicable(f"hidden-split: the inputs of {name} are not ReLU outputs (>= 0 with exact zeros)")
        with torch.no_grad():
            logits_aux = tail(z_aux)
        if not torch.allclose(logits_aux, logits, rtol=1e-4, atol=1e-4 * float(logits.abs().max())):
            raise NotApplicable(f"hidden-split: the layers after {name} do not reproduce the model's logits")
        peel = _Peel(m, w_aug, tail, b, self.opt("tolerance"))
        gen = np.random.default_rng(session.seed)
        patterns = (x_aux == 0).double().numpy()
        cap = 2 * float(x_aux.max())
        for _ in range(self.opt("rounds")):
            advance(b - peel.rank, b)  # samples peeled so far
            if peel.rank == 0 or not peel.round(patterns[gen.permutation(len(patterns))[:self.opt("candidates")]],
                                                cap, gen):
                break
        starts = torch.cat([x_aux, torch.ones(len(x_aux), 1, dtype=x_aux.dtype, device=x_aux.device)], 1)
        for _ in range(self.opt("rounds") if self.opt("fit-steps") > 0 else 0):
            if peel.rank > FIT_MAX_RANK:
                break  # fitted starts find the few samples the LPs leave (measured up to 5), not dozens
            pick = torch.from_numpy(gen.permutation(len(starts))[:self.opt("candidates")])
            if peel.rank == 0 or not peel.fit(starts[pick], self.opt("fit-steps")):
                break
        return peel, logits_aux


class _Peel:
    """The update of the split layer, minus the samples verified so far (``labels``, ``inputs``, ``probs``)."""

    def __init__(self, m: torch.Tensor, w_aug: torch.Tensor, tail: nn.Module, b: int, tolerance: float):
        self.m, self.w_aug, self.tail, self.tol = m, w_aug, tail, tolerance
        self.jac = torch.func.vmap(torch.func.jacrev(tail))
        self.labels: list[int] = []
        self.inputs: list[torch.Tensor] = []
        self.supports: list[torch.Tensor] = []
        self.probs: list[torch.Tensor] = []
        self.rounds = 0
        self.growth = 1.0  # the largest noise floor a verification used, over the first one (reported)
        self.trace: list[dict] | None = None  # a list: each verification's scores and labels passing (benchmarks)
        # the noise floor: the update's first singular value beyond B (its rank), at least float32's rounding.
        # Samples the model is sure of to float32 precision leave terms below it: only the visible rank (singular
        # values above ``tolerance`` times the floor) is split
        s = torch.linalg.svdvals(m)
        self.noise0 = max(float(s[b]) if len(s) > b else 0.0, NOISE_FLOOR * float(s[0]))
        self.rank = self.visible = int((s[:b] > tolerance * self.noise0).sum())

    def deltas(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per candidate input: (1)'s d(x, c) for every label c [N, C, m_out], and the softmax [N, C]."""
        z = x @ self.w_aug.T
        with torch.no_grad():
            p = torch.softmax(self.tail(z), -1)
        j = self.jac(z)  # N x C x m_out
        return (p[:, None, :] @ j) - j, p  # (p - e_c)^T J for every c, without the C x C product

    def _basis(self):
        u, s, vh = torch.linalg.svd(self.m, full_matrices=False)
        noise = max(self.noise0, float(s[self.rank]) if len(s) > self.rank else 0.0)  # peeling adds its rounding
        self.growth = max(self.growth, noise / self.noise0)
        return u[:, :self.rank], s[:self.rank], vh[:self.rank].T, noise

    def _scores(self, x: torch.Tensor, u, s, v):
        """(2) for each candidate input and label [N, C], the deltas and the softmax."""
        d, p = self.deltas(x)
        inside = d @ u
        norm = (d ** 2).sum(-1).clamp_min(1e-300)
        outside = ((norm - (inside ** 2).sum(-1)) / norm).clamp_min(0)  # d in span(U)
        scale = ((x @ v)[:, None, :] * (inside / s)).sum(-1)  # x~^T V S^-1 U^T d = 1
        return outside + (scale - 1) ** 2, d, p

    def round(self, patterns: np.ndarray, cap: float, gen: np.random.Generator) -> bool:
        """One round: candidates from the LPs, each checked by (2) with its best label, verified ones peeled.
        False when none was verified."""
        self.rounds += 1
        u, s, v, noise = self._basis()
        x = torch.from_numpy(_candidate_inputs(v.numpy(), patterns, cap, gen))
        return bool(len(x)) and self._peel(x, u, s, v, noise)

    def fit(self, starts: torch.Tensor, steps: int) -> bool:
        """A round for the samples no LP vertex is (too few inactive units of their own): (2) minimised over each
        candidate's coordinates in the peeled update's row space by Adam, from aux inputs projected onto it."""
        self.rounds += 1
        u, s, v, noise = self._basis()
        a = affine_rows(starts @ v, v[-1]).requires_grad_(True)
        opt = torch.optim.Adam([a], lr=FIT_LR)
        for _ in range(steps):
            x = a @ v.T
            score = self._scores(x, u, s, v)[0].min(1).values + (torch.relu(-x[:, :-1]) ** 2).sum(1)
            opt.zero_grad()
            torch.nan_to_num(score, nan=0.0).sum().backward()
            opt.step()
            with torch.no_grad():
                a.copy_(affine_rows(a, v[-1]))
        x = (a.detach() @ v.T)
        x[:, :-1] = x[:, :-1].clamp_min(0)
        return self._peel(x, u, s, v, noise)

    def _peel(self, x: torch.Tensor, u, s, v, noise: float) -> bool:
        with torch.no_grad():
            score, d, p = self._scores(x, u, s, v)
        best, label = score.min(1)
        verified = 0
        for i in torch.argsort(best).tolist():
            if float(best[i]) > PREFILTER or self.rank == 0:
                break
            support = x[i][:-1] > 1e-3 * float(x[i].abs().max())
            if any(float((x[i] - y).abs().max()) <= SAME * float(y.abs().max())
                   or float((support ^ t).sum()) <= SAME * float((support | t).sum())
                   for y, t in zip(self.inputs, self.supports)):
                continue  # a sample already peeled: what its rounding left of it
            term = d[i, label[i]][:, None] * x[i][None]
            if float(torch.linalg.svdvals(self.m - term)[self.rank - 1]) <= self.tol * noise:  # the rank fell by one
                if self.trace is not None:  # which labels the rank test would pass too (C more SVDs)
                    self.trace.append({"input": x[i], "label": int(label[i]), "scores": score[i].tolist(),
                                       "growth": noise / self.noise0, "passing": [
                                           c for c in range(d.shape[1]) if float(torch.linalg.svdvals(
                                               self.m - d[i, c][:, None] * x[i][None])[self.rank - 1])
                                           <= self.tol * noise]})
                self.m = self.m - term
                self.inputs.append(x[i])
                self.supports.append(support)
                self.labels.append(int(label[i]))
                self.probs.append(p[i])
                self.rank -= 1
                verified += 1
        return verified > 0
