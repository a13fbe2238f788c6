"""sample-split (fedaudit's own method): split a small batch's output-layer update into its B samples, one label each.

Why. Count methods read the output layer's update as per-class error masses (bias-count, ZLG, RLU, LLG); on a
trained model a class's mass does not say how many samples made it, and random batches of 8 stay at 56-66% InsAcc
(docs/results/labels.md, "What a trained model's update shows"). For B < C the update fixes each sample instead.

Model (mean-reduced cross-entropy, one step). With h~_n = [h_n; 1] the output layer's input and a 1 appended,
W~ = [W, b] and e_n = softmax(W~ h~_n) - onehot(y_n):

    B G~ = sum_n e_n h~_n^T,   G~ = [G, g_b]  (C x (M+1))                                          (1)

G~ has rank B when B <= C - 1 (its rows sum to zero, so rank <= C - 1). With G~ = U S V^T (rank B), every h~_n lies
in span(V) and every e_n in span(U): h~_n = V a_n, and (1) becomes E^T A = B U S for A = [a_n] (B x B), i.e.

    E = B A^-T S U^T,   Q(A) := softmax(A V^T W~^T) - B A^-T S U^T = Y                               (2)

so the B x B unknowns A alone decide the labels: at the batch's own A the rows of Q are one-hot, each the sample's
label. The affine row of h~ gives a_n . V[M] = 1 (B linear constraints, kept exactly by projection).

Search. (a) ``--restarts`` starts, each row a_n the projection onto span(V) of a random aux image's features, fitted
by Adam (``--steps``, lr 0.05) to sum_n min_c |q_n - onehot(c)|^2 (plus a penalty on features outside the range the
aux features show: >= 0 where every aux feature is, as after a ReLU, and <= 1 where every aux feature is in [0, 1],
as after a sigmoid; a ReLU network whose aux features all stay below 1 gets the upper bound too, ``--bounds none``
drops both). (b) The lowest start's labels
are then searched: each round fits, from the current A with labels fixed (|Q - Y|^2, ``--refine-steps``), the current
labels and every single relabelling (n, c), the relabelled row restarted at the aux image of class c nearest to
span(V); the best is kept, up to ``--rounds`` rounds, until no relabelling fits better. At the batch's labels the fit
reaches the float32 noise of the client's gradient (1e-9 to 1e-4 measured); the reported ``fit`` is the final value.
It is not a certificate: a labelling one sample off has ended at 8e-5 (docs/results/labels.md, "sample-split").

Not applicable: B >= C (the output layer alone does not fix the split), local steps K > 1 (the model moves between
steps), no output bias gradient (the affine row). Duplicate samples or samples the model is sure of to float32
precision leave G~ with a smaller numerical rank (reported as ``rank_ratio``, the B-th over the first singular value).
"""

from __future__ import annotations

import torch

from fedaudit.errors import NotApplicable
from fedaudit.labels.base import LabelMethod, LabelResult, affine_rows, samples_in_update
from fedaudit.labels.features import head_stats
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.progress import advance
from fedaudit.requirements import BATCH_SIZE, FINAL_BIAS_GRAD, FINAL_WEIGHT_GRAD, SINGLE_STEP
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel

LR, REFINE_LR = 0.05, 0.02


class _Split:
    """Equation (2) for a batch of starts: ``loss(A, Y)`` per start and Q."""

    def __init__(self, g: torch.Tensor, w: torch.Tensor, b: int, lower: float | None, upper: float | None):
        u, s, vh = torch.linalg.svd(g, full_matrices=False)
        self.rank_ratio = float(s[b - 1] / s[0])
        self.u, self.s, self.v = u[:, :b], s[:b], vh[:b].T  # v: (M+1) x B
        self.last = self.v[-1]  # the appended 1's coordinate
        self.logits = w @ self.v  # C x B
        self.su = self.s[:, None] * self.u.T  # B x C
        self.b, self.c, self.lower, self.upper = b, g.shape[0], lower, upper
        self.eye = torch.eye(self.c, dtype=g.dtype, device=g.device)

    def affine(self, a: torch.Tensor) -> torch.Tensor:
        return affine_rows(a, self.last)

    def loss(self, a: torch.Tensor, y: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.affine(a)
        p = torch.softmax(a @ self.logits.T, -1)
        # a start whose features went singular has no split: its loss is made infinite below (solve_ex, not solve:
        # one such start among many must not end the search; float rounding decides which start it is, so it
        # happens on some CPUs and not others)
        x, info = torch.linalg.solve_ex(a.transpose(-1, -2), self.su.expand(a.shape[0], self.b, self.c))
        with torch.no_grad():  # singular to working precision (numpy's matrix_rank tolerance): LU may not see an
            # exact zero pivot there, and returns a huge, meaningless split. A start gone non-finite (a step whose
            # gradient overflowed; on some CPUs, issue 90) has no split either: svdvals refuses non-finite input, so
            # it reads an identity in its place and is marked failed
            finite = torch.isfinite(a.detach()).flatten(-2).all(-1)
            eye = torch.eye(a.shape[-2], a.shape[-1], dtype=a.dtype, device=a.device)
            s = torch.linalg.svdvals(torch.where(finite[..., None, None], a.detach(), eye))
            info = torch.where(s[..., -1] <= s[..., 0] * a.shape[-1] * torch.finfo(a.dtype).eps, 1, info)
            info = torch.where(finite, info, 1)
        e = self.b * x
        q = p - e
        if y is None:  # squared distance of each row to its nearest vertex e_k of the simplex:
            # |q - e_k|^2 = |q|^2 - 2 q_k + 1, least at the largest q_k (O(C) a row, not O(C^2))
            d = (q ** 2).sum(-1) - 2 * q.max(-1).values + 1
        else:
            d = ((q - y) ** 2).sum(-1)
        loss = d.sum(-1)
        if self.lower is not None or self.upper is not None:
            h = (a @ self.v.T)[..., :-1]
            out = torch.zeros_like(h)
            if self.lower is not None:
                out = out + torch.relu(self.lower - h) ** 2
            if self.upper is not None:
                out = out + torch.relu(h - self.upper) ** 2
            loss = loss + out.sum((-1, -2))
        loss = torch.nan_to_num(loss, nan=float("inf"))
        return torch.where(info == 0, loss, torch.full_like(loss, float("inf"))), q

    def fit(self, a: torch.Tensor, steps: int, lr: float, y: torch.Tensor | None = None) -> torch.Tensor:
        a = a.clone().requires_grad_(True)
        opt = torch.optim.Adam([a], lr=lr)
        for _ in range(steps):
            loss, _ = self.loss(a, y)
            opt.zero_grad()
            torch.where(torch.isfinite(loss), loss, 0).sum().backward()
            assert a.grad is not None
            # a finite loss can still have a non-finite gradient (a start near singular): that start stays where it
            # is rather than poisoning itself with NaN (which float rounding decides, so only on some CPUs)
            a.grad = torch.where(torch.isfinite(a.grad), a.grad, 0)
            opt.step()
        return a.detach()


@LABEL_METHODS.register
class SampleSplit(LabelMethod):
    name = "sample-split"
    summary = "split a batch of B < C samples' output-layer update into one feature and one label per sample"
    paper = "fedaudit's own (docs/methods/labels.md, sample-split)"
    requires = (FINAL_WEIGHT_GRAD, FINAL_BIAS_GRAD, BATCH_SIZE, SINGLE_STEP)
    aux = "required"
    options = (
        MethodOption("restarts", int, 64, "starts of the first fit, each from random aux images' features", positive=True),
        MethodOption("steps", int, 1500, "Adam steps of the first fit"),
        MethodOption("rounds", int, 8, "rounds of the label search (single relabellings of the best start)"),
        MethodOption("refine-steps", int, 600, "Adam steps per candidate labelling in the search"),
        MethodOption("bounds", str, "auto", "penalise features outside the aux features' range (auto) or not (none)",
                     ("auto", "none")),
    )

    @classmethod
    def why_not(cls, tm: ThreatModel, session: Session | None = None) -> list[str]:
        reasons = super().why_not(tm, session)
        if not reasons and tm.batch_size and tm.batch_size >= tm.spec.num_classes:
            reasons.append(f"needs a batch smaller than the {tm.spec.num_classes} classes (the output layer's update "
                           f"has rank at most C - 1); the batch size is {tm.batch_size}")
        return reasons

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        b, c = samples_in_update(tm), tm.spec.num_classes
        aux = self.aux_of(session)
        head = dict(tm.model.named_modules())[tm.final_layer]
        w = torch.cat([head.weight.detach(), head.bias.detach()[:, None]], 1).double().cpu()
        g = torch.cat([tm.output_grad("weight").flatten(1), tm.output_grad("bias")[:, None]], 1).double().cpu()
        if float(g.abs().max()) == 0:
            raise NotApplicable("sample-split: the output layer's update is zero")
        h, p = head_stats(tm, aux.images, normalized=aux.normalized)
        h, p = h.cpu(), p.cpu()
        aux_class = aux.labels.cpu() if aux.labels is not None else p.argmax(1)  # the model's label where aux has none
        lower = upper = None
        if self.opt("bounds") == "auto":
            lower = 0.0 if float(h.min()) >= 0 else None  # ReLU / sigmoid features
            upper = 1.0 if lower is not None and float(h.max()) <= 1 else None  # sigmoid features
        split = _Split(g, w, b, lower, upper)
        if float(split.last.norm()) < 1e-12:
            raise NotApplicable("sample-split: the bias gradient is not in the update's row space")
        ht = torch.cat([h, torch.ones(len(h), 1, dtype=h.dtype, device=h.device)], 1)
        proj = ht @ split.v  # aux features in the row space's coordinates
        near = (ht - proj @ split.v.T).norm(dim=1) / ht.norm(dim=1)
        gen = torch.Generator().manual_seed(session.seed)

        # (a) the first fit, from random aux features
        starts = proj[torch.randint(len(proj), (self.opt("restarts"), b), generator=gen, device="cpu").to(proj.device)]
        a = split.fit(split.affine(starts), self.opt("steps"), LR)
        loss, q = split.loss(a)
        best = int(loss.argmin())
        first = float(loss[best])
        a_cur, labels = a[best], q[best].argmax(-1)
        # (b) the label search: every single relabelling, its row restarted at the new class's nearest aux image
        nearest = {k: int(idx[near[idx].argmin()]) for k in range(c) if len(idx := torch.nonzero(aux_class == k).flatten())}
        fit, rounds = first, 0  # with --rounds 0 the first fit's labels stand
        for _ in range(self.opt("rounds")):
            advance(rounds, self.opt("rounds"))  # the rounds stop early once no relabelling fits better
            rounds += 1
            cands, rows = [labels], [a_cur]
            for n in range(b):
                for k in nearest:
                    if k != int(labels[n]):
                        lab = labels.clone()
                        lab[n] = k
                        row = a_cur.clone()
                        row[n] = proj[nearest[k]]
                        cands.append(lab)
                        rows.append(row)
            y = split.eye[torch.stack(cands)]
            fitted = split.fit(split.affine(torch.stack(rows)), self.opt("refine-steps"), REFINE_LR, y)
            losses, _ = split.loss(fitted, y)
            k = int(losses.argmin())
            fit = float(losses[k])
            if k == 0:
                break
            a_cur, labels = fitted[k], cands[k]
        counts = torch.bincount(labels, minlength=c)
        return LabelResult(counts.double(), counts, {
            "fit": fit, "first_fit": first, "rounds": rounds, "rank_ratio": split.rank_ratio,
            "bounds": [lower, upper], "aux": aux.kind})
