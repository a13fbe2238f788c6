"""DAGER (Petrov et al., NeurIPS 2024): exact recovery of a batch of text from a decoder's FedSGD gradient.

A linear layer's weight gradient is ``sum_i delta_i x_i^T``, so its rows lie in the span of the layer's inputs
``x_i`` (one per visible token position); while the batch has fewer visible positions than the model's width ``d``
that span is a proper subspace of R^d, and a vector that is not one of the inputs passes the span check only by
accident. Block 0's query/key/value inputs depend only on (token, position): every vocabulary entry at every
position is checked against block 0's gradient span (the token sets, step 1). Block 1's inputs depend on the whole
prefix: sequences are grown token by token, an extension kept only where its new position lies in block 1's span
(step 2). What passes every check is recovered exactly. docs/text.md has the options and the limits:

* the span check needs fewer visible positions than the model is wide (``B * T < d``); at the width the span holds
  every candidate and every token passes (``saturated`` in the diagnostics; nothing is returned: no sequence can be
  told apart);
* a position whose gradient is zero is invisible by design: padding, and in next-token prediction the last position
  (fedaudit's capture ends every line with the end-of-sequence token, which is that position);
* a sequence that is a prefix of another is not told from it (the longer one is recovered).

The span thresholds follow the reference code's defaults (1e-5 and 1e-3 on the normalised distance); the rank does
not (``span_basis``). A LoRA adapter on the attention inputs is read through its factors (``input_span``): exact while
the batch has fewer visible tokens than the adapter's rank r. FedAvg deltas are not covered yet.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedaudit.attacks.text.registry import TEXT_ATTACKS
from fedaudit.attacks.text.result import TextResult
from fedaudit.errors import NotApplicable
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.methods import Method, MethodOption

GAP = 1e3  # the drop between consecutive singular values that marks the gradient's rank (see span_basis)


def span_basis(gradient: torch.Tensor, rank_tol: float | None) -> tuple[torch.Tensor, int]:
    """An orthonormal basis (d x r, float64) of the row space of ``gradient`` (out x d) and its rank r.

    Without ``rank_tol`` the rank is where the singular values fall by more than GAP at once (the largest such
    fall): the visible positions' directions sit above it and float32 round-off (about 1e-8 of the largest) below;
    no such fall means full rank. numpy's tolerance (sigma_max * max(shape) * eps), the reference code's default,
    cuts real directions on deep models, whose tokens' gradients span four orders of magnitude: on a
    GPT-2-small-shaped model at B = 32 it kept 431 of block 1's 496 directions and nothing was recovered
    (docs/text.md). With ``rank_tol``: the singular values above sigma_max * rank_tol."""
    g = gradient.detach().to(torch.float64)
    _, s, vh = torch.linalg.svd(g, full_matrices=False)
    if s.numel() == 0 or float(s[0]) == 0.0:
        return torch.zeros((g.shape[1], 0), dtype=torch.float64), 0
    if rank_tol is not None:
        rank = int((s > float(s[0]) * rank_tol).sum())
    else:
        positive = s[s > 0]
        falls = positive[:-1] / positive[1:]
        rank = int(torch.argmax(falls)) + 1 if falls.numel() and float(falls.max()) > GAP else int(positive.numel())
    return vh[:rank].T.contiguous(), rank


def span_distance(x: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """||(I - R R^T) x|| / ||x|| for each row of ``x``: 0 inside the span, 1 orthogonal to it."""
    x = x.detach().to(torch.float64)
    x = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    inside = (x @ basis).pow(2).sum(-1)
    return (1.0 - inside).clamp_min(0.0).sqrt()


@dataclass
class InputSpan:
    """What one block's attention-input gradient shows of that layer's inputs: an orthonormal basis of the span it
    checks, the map from an input to the checked space, and the most directions the gradient can show."""

    basis: torch.Tensor
    rank: int
    bound: int
    source: str  # "weight" (full fine-tuning), "lora_A" or "lora_B" (a LoRA adapter's factor)
    down: torch.Tensor | None = None  # lora_B's case: the adapter's A (r x d), which maps an input to the checked space

    def distance(self, x: torch.Tensor) -> torch.Tensor:
        if self.down is not None:
            x = x.detach().to(torch.float64) @ self.down.T
        return span_distance(x, self.basis)


def _sources(gradients: dict[str, torch.Tensor], module: str) -> dict[str, str]:
    """The gradients that show ``module``'s inputs: its weight's, or its LoRA factors' (by role)."""
    if f"{module}.weight" in gradients:
        return {"weight": f"{module}.weight"}
    found = {part: next((k for k in gradients if k.startswith(f"{module}.{part}.")), None) for part in ("lora_A", "lora_B")}
    return {k: v for k, v in found.items() if v} if all(found.values()) else {}


def input_span(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], layer: int, rank_tol: float | None) -> InputSpan:
    """Block ``layer``'s attention-input span. Full fine-tuning: the rows of the weight's gradient (GPT-2's Conv1D
    stores in x out: transposed). A LoRA adapter (W + s B A): grad A = s B^T sum_i delta_i x_i^T has its rows in the
    inputs' span, at most r of them; a fresh adapter (B = 0) has grad A = 0, and grad B = s sum_i delta_i (A x_i)^T
    shows the inputs through A, so candidates are mapped by A before the check (the spec's reading of the paper's
    LoRA variant; the reference code's B path is unclear). docs/text.md."""
    module = f"transformer.h.{layer}.attn.c_attn"
    src = _sources(gradients, module)
    if "weight" in src:
        g = gradients[src["weight"]].T
        basis, rank = span_basis(g, rank_tol)
        return InputSpan(basis, rank, int(g.shape[1]), "weight")
    grad_a, grad_b = gradients[src["lora_A"]], gradients[src["lora_B"]]
    r = int(grad_a.shape[0])
    if bool(grad_a.any()):
        basis, rank = span_basis(grad_a, rank_tol)
        return InputSpan(basis, rank, r, "lora_A")
    a = dict(ckpt.model.named_parameters())[src["lora_A"]].detach().to(torch.float64)
    basis, rank = span_basis(grad_b, rank_tol)
    return InputSpan(basis, rank, r, "lora_B", down=a)


@TEXT_ATTACKS.register
class Dager(Method):
    name = "dager"
    summary = "exact batch recovery from a decoder's first attention layers (span checks of tokens, then sequences)"
    paper = "Petrov et al., DAGER: Exact Gradient Inversion for Large Language Models, NeurIPS 2024"
    options = (
        MethodOption("rank-tol", float, 0.0, "relative singular-value tolerance of the gradients' rank (0: where the "
                     "singular values fall by more than 1000x at once; the reference code uses numpy's "
                     "sigma_max * max(shape) * eps)"),
        MethodOption("tau1", float, 1e-5, "span-distance threshold of step 1 (a token at a position)"),
        MethodOption("tau2", float, 1e-3, "span-distance threshold of step 2 (a sequence's next position)"),
        MethodOption("max-beam", int, 20_000, "the most partial sequences step 2 carries (the best-scoring kept)",
                     positive=True),
        MethodOption("chunk", int, 1024, "sequences per forward of block 0", positive=True),
    )

    def __init__(self, **opts):
        self.opts = self.parse_options(opts)

    @staticmethod
    def reasons(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], local_steps: int = 1) -> list[str]:
        reasons = []
        if ckpt.kind != "decoder":
            reasons.append(f"the {ckpt.model_type} search is not implemented (decoders only)")
        for layer in (0, 1):
            module = f"transformer.h.{layer}.attn.c_attn"
            if not _sources(gradients, module):
                where = ("a LoRA adapter on it, which the adapter does not have" if ckpt.adapter is not None
                         else "which the update withholds")
                reasons.append(f"needs block {layer}'s attention-input gradient ({module}.weight, or {where})")
        if local_steps != 1:
            reasons.append(f"needs a one-step (FedSGD) update; this one has {local_steps} local steps")
        return reasons

    def run(self, ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], batch_size: int | None,
            local_steps: int = 1) -> TextResult:
        if why := self.reasons(ckpt, gradients, local_steps):
            raise NotApplicable("; ".join(why))
        tol = self.opts["rank-tol"] or None
        width = int(ckpt.model.transformer.wte.weight.shape[1])
        spans = [input_span(ckpt, gradients, layer, tol) for layer in (0, 1)]
        diagnostics: dict = {"ranks": [s.rank for s in spans], "width": width, "span_source": [s.source for s in spans],
                             "rank_bounds": [s.bound for s in spans]}
        # a LoRA adapter's gradient shows at most r directions of its layer's inputs: at rank r the batch has at
        # least r visible tokens, the span is a slice of the inputs' span that holds none of them, and nothing can be
        # certified (the bound of the paper's LoRA variant, N < r)
        diagnostics["rank_bound_reached"] = any(s.source != "weight" and s.rank >= s.bound for s in spans)
        empty = TextResult([], [], [], {**diagnostics, "saturated": False, "consistent": False,
                                         "tokens_per_position": [], "complete_sequences": 0})
        if diagnostics["rank_bound_reached"]:
            return empty
        with torch.no_grad():
            tokens = None if self._holds_anything(ckpt, spans[1]) else self._tokens(ckpt, spans[0])
            # where a span holds (nearly) every candidate, as at a full rank (LayerNorm's outputs span d - 1
            # directions when its bias is 0), the check tells nothing apart; the regime is all or nothing (a few
            # candidates pass, or all), so half of them marks it: block 1's span probed with random sequences,
            # block 0's with the vocabulary at each position. The reference code caps the rank at d - 20 instead
            # and searches on.
            saturated = tokens is None
            diagnostics["saturated"] = saturated
            if tokens is None:
                empty.diagnostics["saturated"] = True
                return empty
            sequences, scores = self._sequences(ckpt, tokens, spans[1])
        order = sorted(range(len(sequences)), key=lambda i: scores[i])
        # a truth-free check of the whole search: a batch holds at most B distinct sequences; more means block 1's
        # span let through what the batch does not hold (too many visible tokens for the width, or a rank
        # misjudged), and no sequence is then called exact. (Step 1 alone lets more than B tokens through at a
        # position by design: E[t] + P[p] is a sum of embeddings the span holds for other pairs.)
        per_position = [len(t) for t in tokens]
        consistent = batch_size is None or len(sequences) <= batch_size
        if batch_size:
            order = order[:batch_size]
        return TextResult(
            [sequences[i] for i in order], [consistent and scores[i] < self.opts["tau2"] for i in order],
            [scores[i] for i in order],
            {**diagnostics, "consistent": consistent, "tokens_per_position": per_position,
             "complete_sequences": len(sequences)})

    def _holds_anything(self, ckpt: TextCheckpoint, span: InputSpan, probes: int = 64) -> bool:
        """Whether block 1's span holds more than half of ``probes`` random two-token sequences (seeded): then it
        holds every candidate (the visible positions reach the width there) and step 2 cannot tell any apart."""
        rows = int(ckpt.model.transformer.wte.weight.shape[0])
        seqs = torch.randint(rows, (probes, 2), generator=torch.Generator().manual_seed(0))
        return 2 * int((self._last_distance(ckpt, seqs, span) < self.opts["tau2"]).sum()) > probes

    def _tokens(self, ckpt: TextCheckpoint, span: InputSpan) -> list[list[int]] | None:
        """Step 1: per position, the vocabulary entries whose block-0 input lies in block 0's span (stops at the
        first position none passes); None where more than half the vocabulary passes at a position (saturated)."""
        tr = ckpt.model.transformer
        embed, positions = tr.wte.weight, tr.wpe.weight
        out: list[list[int]] = []
        for p in range(positions.shape[0]):
            d = span.distance(tr.h[0].ln_1(embed + positions[p]))
            hits = torch.nonzero(d < self.opts["tau1"]).flatten()
            if 2 * len(hits) > len(d):
                return None
            if not len(hits):
                break
            out.append(hits[torch.argsort(d[hits])].tolist())
        return out

    def _last_distance(self, ckpt: TextCheckpoint, seqs: torch.Tensor, span: InputSpan) -> torch.Tensor:
        """Block 1's input at the last position of each sequence, as a span distance. The last position attends to
        every earlier one, so causal and full attention agree there and block 0 runs without a mask."""
        tr = ckpt.model.transformer
        out = []
        for chunk in seqs.split(self.opts["chunk"]):
            h = tr.wte(chunk) + tr.wpe(torch.arange(chunk.shape[1]))
            h = tr.h[0](h)
            h = h[0] if isinstance(h, tuple) else h
            out.append(span.distance(tr.h[1].ln_1(h[:, -1])))
        return torch.cat(out)

    def _sequences(self, ckpt: TextCheckpoint, tokens: list[list[int]], span: InputSpan) -> tuple[list[list[int]], list[float]]:
        """Step 2: grow every sequence from step 1's first-position tokens; an extension is kept where its new
        position passes block 1's check; a sequence none of whose extensions passes is complete. Returns the
        complete sequences and their mean span distance."""
        if not tokens:
            return [], []
        # the first position is checked in block 1's span too: step 1 lets through tokens that only sums of the
        # batch's embeddings explain (E[t] + P[0] = (E[t] + P[q]) + (E[s] + P[0]) - (E[s] + P[q]); exactly so at
        # random init, where LayerNorm is a scaled projection), and block 0's nonlinear layers break those sums
        first = self._last_distance(ckpt, torch.tensor([[t] for t in tokens[0]]), span).tolist()
        beam = [[t] for t, dist in zip(tokens[0], first) if dist < self.opts["tau2"]]
        totals = [dist for dist in first if dist < self.opts["tau2"]]  # summed distances of the checked positions
        done: list[list[int]] = []
        scores: list[float] = []
        for i in range(1, len(tokens) + 1):
            if i == len(tokens) or not beam:
                done += beam
                scores += [t / len(s) for s, t in zip(beam, totals)]
                break
            cands = [(b, s + [t]) for b, s in enumerate(beam) for t in tokens[i]]
            d = self._last_distance(ckpt, torch.tensor([c for _, c in cands]), span).tolist()
            kept = [(b, c, dist) for (b, c), dist in zip(cands, d) if dist < self.opts["tau2"]]
            extended = {b for b, _, _ in kept}
            for b, s in enumerate(beam):
                if b not in extended:
                    done.append(s)
                    scores.append(totals[b] / len(s))
            if len(kept) > self.opts["max-beam"]:
                kept = sorted(kept, key=lambda k: totals[k[0]] + k[2])[: self.opts["max-beam"]]
            beam, totals = [c for _, c, _ in kept], [totals[b] + dist for b, _, dist in kept]
        return done, scores
