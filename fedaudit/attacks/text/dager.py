"""DAGER (Petrov et al., NeurIPS 2024): exact recovery of a batch of text from a language model's gradient.

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
the batch has fewer visible tokens than the adapter's rank r.

FedAvg deltas (K local SGD steps): the delta's rows lie in the union of the K steps' input spans, each step's inputs
computed at that step's weights, which the server does not see. The reference code checks every step at the global
weights with the rank padded by 60 and both thresholds loosened to 5e-3 (its fed_avg script; ``steps-at global`` checks
at the global weights too, with this module's rank);
fedaudit searches the steps one by one, each at the weights replayed from the lines recovered for the steps before it
(``_peel``), and certifies the lines only where replaying the whole round on them reproduces the delta. The delta's
rank is read against its round-off (``noise_rank``), not a fall. docs/text.md, "DAGER on FedAvg deltas".

Encoders (BERT classifiers): step 1 as above with BERT's input (token types too), step 2 on whole lines, one length at
a time (fedaudit/attacks/text/dager_encoder.py; docs/text.md, "DAGER on encoders").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedaudit.attacks.text.dager_encoder import EncoderFront, EncoderSearch
from fedaudit.attacks.text.fronts import GPT2Front, LlamaFront, decoder_front
from fedaudit.attacks.text.local_replay import Replay
from fedaudit.attacks.text.registry import TEXT_ATTACKS
from fedaudit.attacks.text.result import TextResult
from fedaudit.errors import NotApplicable
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.methods import Method, MethodOption
from fedaudit.models.text_families import FAMILIES, attention_modules
from fedaudit.text_threat_model import LocalRound, lines_in_round, shown_length

GAP = 1e3  # the drop between consecutive singular values that marks the gradient's rank (see span_basis)
TAU1, TAU2 = 1e-5, 1e-3  # a gradient's span thresholds (the reference code's defaults)
DELTA_TAU = 5e-3  # a delta's, both steps (the reference code's fed_avg script)
WIDE_TAU, WIDE_BEAM = 5e-2, 64  # a delta's second search where the first is not reproduced (see run)
REPLAYED = 1e-3  # a delta's replay residual below which the round is the client's (measured 1e-14 to 4e-6 vs 0.5 to 3.7)
NOISE_MARGIN = 2.0  # a delta's rank: values above this many round-off estimates (noise_rank); a shallow fall's widening (run)


def span_basis(gradient: torch.Tensor, rank_tol: float | None, limit: int | None = None, least: int = 1
               ) -> tuple[torch.Tensor, int, float | None]:
    """An orthonormal basis (d x r, float64) of the row space of ``gradient`` (out x d), its rank r and the drop of
    its singular values there (s_r / s_r+1; None at full rank).

    Without ``rank_tol`` the rank is where the singular values fall by more than GAP at once (the largest such
    fall): the visible positions' directions sit above it and float32 round-off (about 1e-8 of the largest) below;
    no such fall means full rank, unless ``limit`` (the most visible tokens the update can hold, B times the
    positions its position embedding's gradient shows) is below it: the values past the limit are round-off by
    construction, and the largest fall up to the limit marks the rank, if it leaves at least ``least`` directions
    (the longest line's positions: each is a distinct input; a smooth spectrum with no fall, as BERT's 0.02 init
    gives, would otherwise read as a rank of 1 instead of full, "saturated"). A trained model needs that: its confident
    tokens leave weak directions, and on a GPT-2 trained on docstrings the fall was 650x (1e-5 to 2e-8 of the
    largest), not GAP's 1000x; read as full rank, DAGER said "saturated" (docs/text.md, "A trained model").
    numpy's tolerance (sigma_max * max(shape) * eps), the reference code's default, cuts real directions on deep
    models, whose tokens' gradients span four orders of magnitude: on a GPT-2-small-shaped model at B = 32 it kept
    431 of block 1's 496 directions and nothing was recovered (docs/text.md). With ``rank_tol``: the singular values above sigma_max * rank_tol."""
    g = gradient.detach().to(torch.float64)
    _, s, vh = torch.linalg.svd(g, full_matrices=False)
    if s.numel() == 0 or float(s[0]) == 0.0:
        return torch.zeros((g.shape[1], 0), dtype=torch.float64, device=g.device), 0, None
    if rank_tol is not None:
        rank = int((s > float(s[0]) * rank_tol).sum())
    else:
        positive = s[s > 0]
        falls = positive[:-1] / positive[1:]
        rank = int(torch.argmax(falls)) + 1 if falls.numel() and float(falls.max()) > GAP else int(positive.numel())
        if rank == positive.numel():  # no fall reaches GAP
            if limit is not None and 0 < limit < rank:
                shallow = int(torch.argmax(falls[:limit])) + 1
                rank = shallow if shallow >= least else rank
            else:  # no limit below the width: read at the round-off, if a gap straddles it
                rank = _above_round_off(s, torch.finfo(gradient.dtype).eps, least) or rank
    fall = float(s[rank - 1] / s[rank]) if 0 < rank < s.numel() and float(s[rank]) > 0 else None
    return vh[:rank].T.contiguous(), rank, fall


def _above_round_off(s: torch.Tensor, eps: float, least: int) -> int | None:
    """A gradient's rank read at the recorded precision's round-off, where no fall reaches GAP and no limit below the
    width applies (where one does, its reading stands): the singular values above NOISE_MARGIN * eps * s_0, provided
    none lies between eps * s_0 and that (a gap that straddles the round-off: the values below are round-off, those
    above the inputs' directions) and at least ``least`` are above; else None (a spectrum that runs smoothly into the
    round-off keeps its full rank; BERT's 0.02 init, under its limit, stays "saturated"). On a GPT-2-small-width
    model trained on docstrings (B = 32, T = 32) block 0's inputs fell 666x, from 1.2e-5 to 1.8e-8 of s_0, with 504
    visible tokens against a limit of 928 above the width: read as full rank, DAGER said "saturated"
    (docs/results/text.md, "A trained model at GPT-2-small's width")."""
    top = float(s[0])
    rank = int((s > NOISE_MARGIN * eps * top).sum())
    if rank < least or rank >= s.numel() or int((s > eps * top).sum()) != rank:
        return None
    return rank


def noise_rank(change: torch.Tensor, weight: torch.Tensor, steps: int, recorded: torch.dtype
               ) -> tuple[torch.Tensor, int, float]:
    """An orthonormal basis of the row space of a recorded delta ``change`` (out x d) and its rank, read against its
    round-off: each of the client's K steps rounds the weights (``w - lr g`` to the weights' precision), and the
    recorded difference to its own, so the change carries noise of about eps * |w| per entry, a random matrix whose
    largest singular value is about eps * rms(w) * sqrt(K) * (sqrt(out) + sqrt(d)) / 2 (measured: the noise bulk tops at
    0.5-0.6 of that estimate on GPT-2-shaped deltas in float32). The rank is the count of singular values above
    NOISE_MARGIN estimates. A delta has no clean fall to read: two steps' inputs of one (token, position) differ by the
    drift and leave a direction as small as it, and at small learning rates the batch's directions fade into the noise.
    Also returns the round-off estimate relative to the largest singular value (1: the change is all round-off)."""
    g = change.detach().to(torch.float64)
    eps = max(torch.finfo(recorded).eps, torch.finfo(weight.dtype).eps)
    rms = float(weight.detach().to(torch.float64).pow(2).mean().sqrt())
    noise = eps * rms * steps ** 0.5 * (g.shape[0] ** 0.5 + g.shape[1] ** 0.5) / 2
    _, s, vh = torch.linalg.svd(g, full_matrices=False)
    rank = int((s > NOISE_MARGIN * noise).sum())
    return vh[:rank].T.contiguous(), rank, min(1.0, noise / float(s[0])) if s.numel() and float(s[0]) > 0 else 1.0


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
    round_off: float | None = None  # a delta's: its round-off estimate relative to its largest singular value
    fall: float | None = None  # a gradient's: its singular values' drop at the rank (s_r / s_r+1; None at full rank)
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


def _shown(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], layer: int) -> list[dict[str, str]]:
    """What block ``layer``'s attention-input modules show of its inputs (fedaudit/models/text_families.py), each
    module's gradients by role, the modules the update withholds left out."""
    return [src for m in attention_modules(ckpt.model_type, layer) if (src := _sources(gradients, m))]


def input_span(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], layer: int, rank_tol: float | None,
               change: dict[str, torch.Tensor] | None = None, steps: int = 1, recorded: torch.dtype = torch.float32,
               limit: tuple[int, int] | None = None) -> InputSpan:
    """Block ``layer``'s attention-input span. Full fine-tuning: the rows of the weights' gradients (GPT-2's Conv1D
    stores in x out: transposed; BERT's query, key and value stacked, as they share the input), or of a delta's change
    (its weight decay taken out: ``LocalRound.rows``), its rank read against the round-off (``noise_rank``;
    ``recorded``: the recorded tensors' dtype). A LoRA adapter (W + s B A): grad A = s B^T sum_i delta_i x_i^T has its
    rows in the inputs' span, at most r of them (stacked over the adapted modules: their r's summed); a fresh adapter
    (B = 0) has grad A = 0, and grad B = s sum_i delta_i (A x_i)^T shows the inputs through A, so candidates are
    mapped by A before the check (the spec's reading of the paper's LoRA variant; the reference code's B path is
    unclear; the first adapted module's). ``limit``: the most visible tokens the update can hold and the fewest
    directions it shows (``visible_limit``, ``span_basis``). docs/text.md."""
    shown = _shown(ckpt, gradients, layer)
    most, least = limit or (None, 1)
    flip = FAMILIES[ckpt.model_type].transposed
    keys = [src["weight"] for src in shown if "weight" in src]
    if keys:
        rows = change if change is not None else gradients
        g = torch.cat([rows[k].T if flip else rows[k] for k in keys])
        if change is not None and rank_tol is None:
            params = dict(ckpt.model.named_parameters())
            weight = torch.cat([params[k].T if flip else params[k] for k in keys])
            basis, rank, floor = noise_rank(g, weight, steps, recorded)
            return InputSpan(basis, rank, int(g.shape[1]), "weight", round_off=floor)
        basis, rank, fall = span_basis(g, rank_tol, most, least)
        return InputSpan(basis, rank, int(g.shape[1]), "weight", fall=fall)
    grads_a = [gradients[src["lora_A"]] for src in shown]
    if all(bool(a.any()) for a in grads_a):
        basis, rank, _ = span_basis(torch.cat(grads_a), rank_tol, most, least)
        return InputSpan(basis, rank, sum(int(a.shape[0]) for a in grads_a), "lora_A")
    first = shown[0]
    a = dict(ckpt.model.named_parameters())[first["lora_A"]].detach().to(torch.float64)
    basis, rank, _ = span_basis(gradients[first["lora_B"]], rank_tol, most, least)
    return InputSpan(basis, rank, int(a.shape[0]), "lora_B", down=a)


def visible_limit(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], batch_size: int | None
                  ) -> tuple[int, int] | None:
    """The most visible tokens a one-step update can hold, B times the positions with a gradient in the position
    embedding (a decoder's last position predicts nothing and has none; padding has none), and the fewest directions
    it shows, those positions (the longest line's, each a distinct input). None without B or that gradient
    (withheld, or rotary positions)."""
    length = shown_length(ckpt, gradients)  # the padded length; a decoder's last position has no gradient
    if not batch_size or length is None:
        return None
    positions = length if ckpt.kind == "encoder" else length - 1
    return batch_size * positions, positions


@TEXT_ATTACKS.register
class Dager(Method):
    name = "dager"
    summary = "exact batch recovery from a language model's first attention layers (span checks of tokens, then lines)"
    paper = "Petrov et al., DAGER: Exact Gradient Inversion for Large Language Models, NeurIPS 2024"
    uses_labels = False  # the span checks do not depend on them
    options = (
        MethodOption("rank-tol", float, 0.0, "relative singular-value tolerance of the gradients' rank (0: a "
                     "gradient's where its singular values fall by more than 1000x at once, else at a gap across its "
                     "float round-off; a delta's above its round-off; the reference code uses numpy's "
                     "sigma_max * max(shape) * eps)"),
        MethodOption("tau1", float, 0.0, "span-distance threshold of step 1, a token at a position (0: 1e-5 for a "
                     "gradient, widened to 2 s_r+1/s_r where block 0's fall is under 1000x or lines come back short; "
                     "5e-3 for a delta)"),
        MethodOption("tau2", float, 0.0, "span-distance threshold of step 2, a sequence's next position (0: 1e-3 "
                     "for a gradient, widened to 2 s_r+1/s_r where lines come back short even so; 5e-3 for a delta)"),
        MethodOption("steps-at", str, "replay", "a FedAvg delta's checks: each local step at the weights replayed on "
                     "the steps before it (replay), or every step at the global weights, the reference code's way "
                     "(global: the lines of later steps drift out of the span when the learning rate is not small)",
                     choices=("replay", "global")),
        MethodOption("max-beam", int, 20_000, "the most partial sequences step 2 carries (the best-scoring kept)",
                     positive=True),
        MethodOption("chunk", int, 1024, "sequences per forward of block 0", positive=True),
        MethodOption("max-candidates", int, 100_000, "an encoder's lines of one length enumerated whole at most; "
                     "beyond, the length is searched by coordinate descent (the reference code samples 1e7)",
                     positive=True),
        MethodOption("restarts", int, 8, "an encoder's coordinate-descent starts per search (the first from each "
                     "position's best token, the others random, seeded)", positive=True),
        MethodOption("shortlist", int, 8, "an encoder's coordinate-descent move scores every token of a position's "
                     "list at that position alone (its attention row and feed-forward pass, the other positions' "
                     "keys and values kept), then the best N on the whole line (0: every token on the whole line)"),
    )

    def __init__(self, **opts):
        self.opts = self.parse_options(opts)

    @staticmethod
    def reasons(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], local_steps: int = 1) -> list[str]:
        reasons = []
        if ckpt.kind == "encoder" and ckpt.layers < 3:
            # measured (tests/test_text_encoder.py): a 2-layer classifier's block 1 is its last, which reads only
            # [CLS]: its gradient holds a few combinations of each line's inputs, not the inputs themselves
            reasons.append(f"the encoder has {ckpt.layers} layer(s): block 1's gradient shows its inputs only where a "
                           "later layer reads every position (3 layers or more; in the last, only [CLS] is read)")
        for layer in (0, 1):
            if not _shown(ckpt, gradients, layer):
                modules = " / ".join(f"{m}.weight" for m in attention_modules(ckpt.model_type, layer))
                where = ("a LoRA adapter on one, which the adapter does not have" if ckpt.adapter is not None
                         else "which the update withholds")
                reasons.append(f"needs block {layer}'s attention-input gradient ({modules}, or {where})")
        if local_steps != 1 and ckpt.kind == "encoder":
            reasons.append(f"an encoder's delta of {local_steps} local steps is not covered: its steps are searched "
                           "at replayed weights, and replaying a classifier's round needs its labels, which the "
                           "update does not carry (a decoder's next-token loss needs none)")
        elif local_steps != 1 and ckpt.adapter is not None:
            reasons.append(f"a LoRA adapter's delta of {local_steps} local steps is not covered (the paper's LoRA "
                           "variant reads one gradient; the adapter's factors move each other between steps)")
        return reasons

    def run(self, ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], batch_size: int | None,
            local_steps: int = 1, local: LocalRound | None = None, labels: torch.Tensor | None = None) -> TextResult:
        """``local``: a delta's local round (its change, learning rate, ...), which a delta of ``local_steps`` > 1
        needs: its steps are searched one by one at the replayed weights. ``labels`` (a classifier's) are not used:
        the span checks do not depend on them."""
        if why := self.reasons(ckpt, gradients, local_steps):
            raise NotApplicable("; ".join(why))
        multi = local_steps > 1
        if multi and (local is None or not batch_size):
            raise NotApplicable(f"a delta of {local_steps} local steps needs its learning rate, its change and the "
                                "batch size (fedaudit.local_lr, fedaudit.batch_size)")
        tol = self.opts["rank-tol"] or None
        # the span thresholds of this run (step 1's, step 2's): a value passed along, never the attack's state, so
        # that one run's widened retry does not carry into the next
        tau = (self.opts["tau1"] or (DELTA_TAU if multi else TAU1), self.opts["tau2"] or (DELTA_TAU if multi else TAU2))
        width = ckpt.width
        rows = local.rows(dict(ckpt.model.named_parameters())) if multi and local else None
        recorded = next(iter(local.change.values())).dtype if multi and local and local.change else torch.float32
        limit = visible_limit(ckpt, gradients, batch_size) if not multi else None
        spans = [input_span(ckpt, gradients, layer, tol, rows, local_steps, recorded, limit) for layer in (0, 1)]
        # a rank read at a fall shallower than GAP (a trained model's weak directions, span_basis): the span's
        # weakest directions are off by up to about s_r+1 / s_r (Wedin's sin-theta bound, s_r+1 standing for the
        # round-off's norm, NOISE_MARGIN times), so step 1's threshold, if the user did not set it, widens to it.
        # Measured on a GPT-2 trained on docstrings: true tokens at 2e-5 to 2e-3 from block 0's span, the
        # reference's 1e-5 cut them and lines came back short (docs/text.md, "A trained model"). Step 2's, which
        # certifies the lines, widens only where a search shows it must (``_widened``): at its bound up front
        # (1.7e-2) a trained width-256 model's B = 16 batch let other lines in and lost 3 of 16; at 1e-3 all exact
        if not self.opts["tau1"] and spans[0].fall is not None and spans[0].fall < GAP:
            tau = (max(tau[0], NOISE_MARGIN / spans[0].fall), tau[1])
        diagnostics: dict = {"ranks": [s.rank for s in spans], "width": width, "span_source": [s.source for s in spans],
                             "rank_bounds": [s.bound for s in spans], "visible_limit": limit[0] if limit else None,
                             "tau": list(tau)}
        if multi:
            diagnostics["round_off"] = [s.round_off for s in spans]
        # a LoRA adapter's gradient shows at most r directions of its layer's inputs: at rank r the batch has at
        # least r visible tokens, the span is a slice of the inputs' span that holds none of them, and nothing can be
        # certified (the bound of the paper's LoRA variant, N < r)
        diagnostics["rank_bound_reached"] = any(s.source != "weight" and s.rank >= s.bound for s in spans)
        empty = TextResult([], [], [], {**diagnostics, "saturated": False, "consistent": False,
                                         "tokens_per_position": [], "complete_sequences": 0})
        if diagnostics["rank_bound_reached"]:
            return empty
        if ckpt.kind == "encoder":
            return self._encoder(ckpt, spans, batch_size, diagnostics, empty, tau)
        with torch.no_grad():
            # where a span holds (nearly) every candidate, as at a full rank (LayerNorm's outputs span d - 1
            # directions when its bias is 0), the check tells nothing apart; the regime is all or nothing (a few
            # candidates pass, or all), so half of them marks it: block 1's span probed with random sequences,
            # block 0's with the vocabulary at each position. The reference code caps the rank at d - 20 instead
            # and searches on.
            front = decoder_front(ckpt.model, ckpt.model_type)
            tokens = None if self._holds_anything(front, spans[1], tau[1]) else self._tokens(front, spans[0], tau[0])
            diagnostics["saturated"] = tokens is None
            diagnostics["position_free"] = front.position_free  # rotary: tokens_per_position is the one token set
            if tokens is None:
                empty.diagnostics["saturated"] = True
                return empty
            if multi and self.opts["steps-at"] == "replay":
                assert local is not None and batch_size
                sequences, scores, extra = self._peel(ckpt, spans, tokens, batch_size, local, tau)
                extra["widened"] = False  # every report says whether the search widened (a reproduced replay: no)
                if extra["replay_residual"] >= REPLAYED and not (self.opts["tau1"] or self.opts["tau2"]):
                    # not reproduced: a true line's weak directions may sit in the round-off (near the width, or
                    # a line used twice in a cycling round, whose two copies differ only by the drift), which puts
                    # its distance past 5e-3; the replay certifies, so the thresholds may widen, once, with the
                    # search's beam kept small (WIDE_BEAM lines per batch line, the best-scoring) for its cost
                    wide_tau = (WIDE_TAU, WIDE_TAU)
                    wide = self._peel(ckpt, spans, self._tokens(front, spans[0], WIDE_TAU) or [], batch_size, local,
                                      wide_tau, beam=min(self.opts["max-beam"], WIDE_BEAM * batch_size))
                    extra["widened"] = wide[2]["replay_residual"] < extra["replay_residual"]
                    if extra["widened"]:
                        sequences, scores, extra = wide[0], wide[1], {**wide[2], "widened": True}
                        tau = wide_tau
                    diagnostics["tau"] = list(tau)
                diagnostics.update(extra)
            else:
                sequences, scores = self._sequences(front, tokens, spans[1], tau[1], start=ckpt.start_id)
                widened = self._widened(front, ckpt, spans, (tokens, sequences, scores), tau, batch_size)
                if widened is not None:
                    (tokens, sequences, scores), tau = widened
                    diagnostics["tau"] = list(tau)
                diagnostics["widened"] = widened is not None

        order = sorted(range(len(sequences)), key=lambda i: scores[i])
        # a truth-free check of the whole search: a batch holds at most B distinct sequences (a delta's round K x B);
        # more means block 1's
        # span let through what the batch does not hold (too many visible tokens for the width, or a rank
        # misjudged), and no sequence is then called exact. (Step 1 alone lets more than B tokens through at a
        # position by design: E[t] + P[p] is a sum of embeddings the span holds for other pairs.) A delta's steps
        # are each taken B at a time (``_peel``).
        per_position = [len(t) for t in tokens]
        most = lines_in_round(batch_size, local_steps, local.examples if local else None)
        consistent = most is None or len(sequences) <= most
        if most and "local_step" not in diagnostics:
            order = order[:most]
        if "local_step" in diagnostics:
            diagnostics["local_step"] = [diagnostics["local_step"][i] for i in order]
        # a delta's checks are loose (5e-3) and noisy: a line whose next token fails its check ends early and passes
        # as a whole line (measured at lr 1e-4: four first words alone). So a delta's lines are certified only where
        # replaying the round on them reproduces the recorded change (every line then is the client's); the
        # reference code's reading (``steps-at global``) has no replay and certifies none.
        replayed = not multi or diagnostics.get("replay_residual", float("inf")) < REPLAYED
        exact = [replayed and consistent and score < tau[1] for score in scores]
        if not multi:
            diagnostics["unexplained_directions"] = unexplained(spans[1].rank, [sequences[i] for i in order],
                                                                ckpt.start_id is not None)
        return _ordered(sequences, exact, scores, order, {**diagnostics, "consistent": consistent,
                                                          "tokens_per_position": per_position})

    def _widened(self, front: GPT2Front | LlamaFront, ckpt: TextCheckpoint, spans: list[InputSpan], found: tuple,
                 tau: tuple[float, float], batch_size: int | None) -> tuple[tuple, tuple[float, float]] | None:
        """A gradient's second searches where the first left block 1's directions unexplained (lines cut short or
        missed, truth-free: ``unexplained``): step 1's threshold widened up to block 0's fall's Wedin bound,
        NOISE_MARGIN / fall (as a fall under GAP's is at once, run), then, if directions are still unexplained, step
        2's up to block 1's, each by ``_ladder``; a user-set threshold is never widened. A search is kept only where it
        explains more of block 1's span and stays consistent (at most B lines): a wide step-2 threshold can let in lines
        the batch does not hold (on a trained width-256 model, B = 16: 1e-3 to 1e-2 exact, the bound 1.7e-2 not).
        Measured: round-off at 1/2,000 to 1/5,000 of block 0's weakest direction (a fall above GAP) cut 2-11 tokens
        at 1e-5, each case flagged by unexplained directions (docs/text.md, "A trained model"). Returns ((tokens,
        sequences, scores), tau) of the last search kept, or None."""
        start = ckpt.start_id is not None
        missing = self._unexplained(spans[1].rank, found[1], found[2], batch_size, start)
        kept = None
        for step, name in ((0, "tau1"), (1, "tau2")):
            fall = spans[step].fall
            bound = NOISE_MARGIN / fall if fall else 0.0
            if self.opts[name] or bound <= tau[step]:
                continue
            for wider in _ladder(tau[step], bound):
                if missing == 0:
                    break
                trial = (wider, tau[1]) if step == 0 else (tau[0], wider)
                tokens = self._tokens(front, spans[0], trial[0]) if step == 0 else found[0]
                if tokens is None:  # the wider threshold passes (nearly) every token: nothing to tell apart
                    break
                sequences, scores = self._sequences(front, tokens, spans[1], trial[1], start=ckpt.start_id)
                if batch_size and len(sequences) > batch_size:  # more lines than the batch holds: others let in,
                    break  # and a wider threshold lets in more
                left = self._unexplained(spans[1].rank, sequences, scores, batch_size, start)
                if left < missing:
                    found, tau, missing, kept = (tokens, sequences, scores), trial, left, True
        return (found, tau) if kept else None

    @staticmethod
    def _unexplained(rank: int, sequences: list[list[int]], scores: list[float], batch_size: int | None,
                     start: bool) -> int:
        """``unexplained`` over the lines the result keeps (the B best-scoring)."""
        order = sorted(range(len(sequences)), key=lambda i: scores[i])[:batch_size or None]
        return unexplained(rank, [sequences[i] for i in order], start)

    def _encoder(self, ckpt: TextCheckpoint, spans: list[InputSpan], batch_size: int | None, diagnostics: dict,
                 empty: TextResult, tau: tuple[float, float]) -> TextResult:
        """An encoder's search (fedaudit/attacks/text/dager_encoder.py): its lines are exact where every position
        passes block 1's check, and certified while the batch holds no more exact lines than B."""
        o = self.opts
        search = EncoderSearch(tau[0], tau[1], o["max-candidates"], o["restarts"], o["chunk"],
                               shortlist=o["shortlist"])
        cls, sep, pad = ckpt.start_id, ckpt.eos_id, ckpt.pad_id
        assert cls is not None
        with torch.no_grad():
            front = EncoderFront.of(ckpt.model)
            found = None if search.holds_anything(front, spans[1], cls, sep) else \
                search.tokens(front, spans[0], cls, sep, pad)
            if found is None:
                empty.diagnostics["saturated"] = True
                return empty
            lines, scores, exact, extra = search.lines(front, spans[1], found, batch_size, cls, sep)
        order = sorted(range(len(lines)), key=lambda i: (not exact[i], scores[i]))
        consistent = batch_size is None or sum(exact) <= batch_size
        if batch_size:
            order = order[:max(batch_size, sum(exact))]
        per_position = [len(set(t for k in p.values() for t in k)) for p in found.tokens[1:]]
        return _ordered(lines, [consistent and e for e in exact], scores, order,
                        {**diagnostics, **extra, "saturated": False, "consistent": consistent,
                         "tokens_per_position": per_position})

    def _peel(self, ckpt: TextCheckpoint, spans: list[InputSpan], tokens: list[list[int]], batch_size: int,
              local: LocalRound, tau: tuple[float, float], beam: int | None = None
              ) -> tuple[list[list[int]], list[float], dict]:
        """A delta's steps one by one: step k's lines are exact at the weights after k steps (block 1's inputs
        move by 1e-2 of their length per step at lr 1e-3 on a random-init model, beyond any threshold that keeps
        false extensions out), which the server does not see but can replay: search at the replayed weights, take
        the B best sequences not taken by an earlier step, step the replay on them (the client's loss, lines ended
        by the end-of-sequence token), go on; step 1's tokens too, at each step's weights. A round that
        cycles over fewer lines than K x B repeats its first batches; the replayed change against the recorded one
        is reported (``replay_residual``)."""
        replay = Replay(ckpt, local)
        batches = (lines_in_round(batch_size, local.steps, local.examples) or batch_size) // batch_size
        taken: dict[tuple[int, ...], tuple[float, int]] = {}
        steps: list[list[list[int]]] = []
        for k in range(local.steps):
            if k < batches:
                front = decoder_front(replay.model, ckpt.model_type)
                here = tokens if k == 0 else self._tokens(front, spans[0], tau[0]) or []
                found, scores = self._sequences(front, here, spans[1], tau[1], beam, start=ckpt.start_id)
                fresh = sorted((sc, s) for s, sc in zip(found, scores) if tuple(s) not in taken)[:batch_size]
                taken.update({tuple(s): (sc, k) for sc, s in fresh})
                steps.append([s for _, s in fresh])
            replay.step(steps[k % batches])
        sequences = [list(s) for s in taken]
        return sequences, [taken[tuple(s)][0] for s in sequences], {
            "local_step": [taken[tuple(s)][1] for s in sequences], "per_step": [len(s) for s in steps],
            "replay_residual": replay.residual(local.change)}

    def _holds_anything(self, front: GPT2Front | LlamaFront, span: InputSpan, tau2: float, probes: int = 64) -> bool:
        """Whether block 1's span holds more than half of ``probes`` random two-token sequences (seeded): then it
        holds every candidate (the visible positions reach the width there) and step 2 cannot tell any apart."""
        rows = int(front.embed.shape[0])
        # drawn on the host: the same probes on every device
        seqs = torch.randint(rows, (probes, 2), generator=torch.Generator().manual_seed(0), device="cpu").to(front.device)
        return 2 * int((self._last_distance(front, seqs, span) < tau2).sum()) > probes

    def _tokens(self, front: GPT2Front | LlamaFront, span: InputSpan, tau1: float) -> list[list[int]] | None:
        """Step 1: per position, the vocabulary entries whose block-0 input lies in block 0's span (stops at the
        first position none passes; rotary positions: one pass, the token set, offered at every position up to the
        model's); None where more than half the vocabulary passes at a position (saturated)."""
        out: list[list[int]] = []
        for p in range(front.max_positions):
            d = span.distance(front.token_inputs(p))
            hits = torch.nonzero(d < tau1).flatten()
            if 2 * len(hits) > len(d):
                return None
            if not len(hits):
                break
            out.append(hits[torch.argsort(d[hits])].tolist())
            if front.position_free:  # one set, offered at every position by step 2
                break
        return out

    def _last_distance(self, front: GPT2Front | LlamaFront, seqs: torch.Tensor, span: InputSpan) -> torch.Tensor:
        """Block 1's input at the last position of each sequence, as a span distance."""
        return torch.cat([span.distance(front.last_inputs(chunk)) for chunk in seqs.split(self.opts["chunk"])])

    def _sequences(self, front: GPT2Front | LlamaFront, tokens: list[list[int]], span: InputSpan, tau2: float,
                   beam_size: int | None = None, start: int | None = None) -> tuple[list[list[int]], list[float]]:
        """Step 2: grow every sequence from step 1's first-position tokens; an extension is kept where its new
        position passes block 1's check; a sequence none of whose extensions passes is complete. Returns the
        complete sequences and their mean span distance. Rotary positions: step 1's one token set is offered at
        every position, up to the model's positions. ``start``: the token every line begins with (LLaMA's BOS), left
        out of the sequences returned (it is not the client's text)."""
        if not tokens:
            return [], []
        length = front.max_positions if front.position_free else len(tokens)
        # the first position is checked in block 1's span too: step 1 lets through tokens that only sums of the
        # batch's embeddings explain (E[t] + P[0] = (E[t] + P[q]) + (E[s] + P[0]) - (E[s] + P[q]); exactly so at
        # random init, where LayerNorm is a scaled projection), and block 0's nonlinear layers break those sums
        first = self._last_distance(front, torch.tensor([[t] for t in tokens[0]], device=front.device), span).tolist()
        beam = [[t] for t, dist in zip(tokens[0], first) if dist < tau2]
        totals = [dist for dist in first if dist < tau2]  # summed distances of the checked positions
        done: list[list[int]] = []
        scores: list[float] = []
        for i in range(1, length + 1):
            if i == length or not beam:
                done += beam
                scores += [t / len(s) for s, t in zip(beam, totals)]
                break
            cands = [(b, s + [t]) for b, s in enumerate(beam) for t in tokens[0 if front.position_free else i]
                     if t != start]  # the start token begins a line only (else [BOS, BOS, ..] passes as [BOS])
            d = self._last_distance(front, torch.tensor([c for _, c in cands], device=front.device), span).tolist()
            kept = [(b, c, dist) for (b, c), dist in zip(cands, d) if dist < tau2]
            extended = {b for b, _, _ in kept}
            for b, s in enumerate(beam):
                if b not in extended:
                    done.append(s)
                    scores.append(totals[b] / len(s))
            most = beam_size or self.opts["max-beam"]
            if len(kept) > most:
                kept = sorted(kept, key=lambda k: totals[k[0]] + k[2])[:most]
            beam, totals = [c for _, c, _ in kept], [totals[b] + dist for b, _, dist in kept]
        if start is not None:
            done = [s[1:] if s[:1] == [start] else s for s in done]
        return done, scores


def _ladder(tau: float, bound: float) -> list[float]:
    """The wider thresholds a second search tries, narrowest first: tau times 10, 100, ... below ``bound``, then
    ``bound`` (the Wedin bound is an upper bound on the span's error: true tokens sit inside it, often well inside,
    and every step wider lets more false ones in)."""
    steps = []
    t = tau * 10
    while t < bound:
        steps.append(t)
        t *= 10
    return steps + [bound]


def unexplained(rank: int, lines: list[list[int]], start: bool) -> int:
    """Block 1's directions that ``lines`` do not account for (truth-free): each distinct prefix of a decoder's line
    is one block-1 input, one direction (plus the start token's, where lines begin with one). More directions than
    prefixes: a line was cut short (a true token failed a check) or missed; the lines returned are still the batch's,
    but not all of it (docs/text.md, "A trained model")."""
    prefixes = {tuple(line[:k]) for line in lines for k in range(1, len(line) + 1)}
    return max(0, rank - len(prefixes) - int(start))


def _ordered(lines: list[list[int]], exact: list[bool], scores: list[float], order: list[int],
             diagnostics: dict) -> TextResult:
    """The search's result, its lines in ``order`` (the decoder's and the encoder's alike); ``complete_sequences``
    counts every line found, ``order`` may keep fewer."""
    return TextResult([lines[i] for i in order], [exact[i] for i in order], [scores[i] for i in order],
                      {**diagnostics, "complete_sequences": len(lines)})
