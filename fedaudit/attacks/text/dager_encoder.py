"""DAGER's encoder variant (BERT): a line's block-1 inputs depend on the whole line (attention looks both ways), so
sequences cannot be grown token by token as a decoder's are; each candidate line is checked whole.

Step 1 is the decoder's with BERT's input: ``LayerNorm(E[v] + P[p] + S[t])`` for every token v at every position p,
both token types t; where [SEP] passes at p with type t, a line of that type ends there (its length is known). Step 2
checks whole lines, one length at a time: [CLS], a token from step 1's list at each position, [SEP]; a line is exact
where every position's block-1 input lies in block 1's span. The reference code enumerates the product of the
positions' lists (sampling it when it exceeds 1e7) after cutting each list to its B best tokens; fedaudit enumerates it
while it holds at most ``max-candidates`` lines and otherwise searches it by coordinate descent (one position at a
time, every token of its list tried, the line's mean distance kept lowest; rounds of ``restarts`` starts), keeping
every list whole: on a random-init model step 1 lets sums of the batch's embeddings through at the same distance as
the true tokens (LayerNorm with no bias is a projection), so cutting a list to its B best drops true ones; and lines
share tokens at a position, so removing a found line's tokens (the reference's ``non-overlap`` filter) loses the
others (measured: a line sharing '##i' at position 4 with another). A move scores each token at its position alone
first (``position_inputs``) and the ``shortlist`` best on the whole line; the ends are searched best first (one probe
descent each, then full searches where a probe found a line, the rest by how close their probes came, then revisits
while fewer than B lines are exact): at random init most ends are sums' [SEP]s. docs/text.md, "DAGER on encoders".
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch

TYPES = (0, 1)  # BERT's token types: a single-sentence line has type 0, a second sentence 1
SWEEPS = 20  # coordinate-descent sweeps over a line's positions at most (each stops at the first with no change)
REVISITS = 3  # further searches of the lengths that gave exact lines while fewer than B are exact


@dataclass
class EncoderFront:
    """What an encoder's first two blocks' attention inputs are computed from: its embeddings (word, position,
    type, LayerNorm) and block 0."""

    embeddings: Any
    layer0: Any

    @classmethod
    def of(cls, model: Any) -> "EncoderFront":
        return cls(model.bert.embeddings, model.bert.encoder.layer[0])

    @property
    def vocab(self) -> int:
        return int(self.embeddings.word_embeddings.weight.shape[0])

    @property
    def positions(self) -> int:
        return int(self.embeddings.position_embeddings.weight.shape[0])

    @property
    def device(self) -> torch.device:
        return self.embeddings.word_embeddings.weight.device

    def token_inputs(self, position: int, kind: int, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Block 0's input for every vocabulary entry (or ``tokens``) at ``position`` with token type ``kind``."""
        e = self.embeddings
        words = e.word_embeddings.weight if tokens is None else e.word_embeddings.weight[tokens]
        return e.LayerNorm(words + e.position_embeddings.weight[position] + e.token_type_embeddings.weight[kind])

    def line_inputs(self, ids: torch.Tensor, kind: int) -> torch.Tensor:
        """Block 1's inputs (n x l x d) for whole lines ``ids`` (n x l) of token type ``kind``, unpadded."""
        h = self.layer0(self.embeddings(input_ids=ids, token_type_ids=torch.full_like(ids, kind)))
        return h[0] if isinstance(h, tuple) else h

    def position_inputs(self, line: torch.Tensor, kind: int, position: int, tokens: torch.Tensor) -> torch.Tensor:
        """Block 1's input at ``position`` alone (n x d) for the line ``line`` (l,) with that position's token set to
        each of ``tokens`` (n,): the other positions' keys and values are computed once, and only that position's
        attention row and feed-forward pass run per token, about l times cheaper than ``line_inputs`` on the n
        lines (equal to its column ``position``: tests/test_text_encoder.py). BERT's post-LayerNorm block: attention
        over the unpadded line, output dense + LayerNorm with the residual, feed-forward + LayerNorm."""
        block, attention = self.layer0, self.layer0.attention.self
        heads, size = attention.num_attention_heads, attention.attention_head_size
        x = self.embeddings(input_ids=line[None], token_type_ids=torch.full_like(line[None], kind))[0]  # l x d
        own = self.token_inputs(position, kind, tokens)  # n x d: each token's block-0 input at ``position``
        n, length = own.shape[0], x.shape[0]
        keys, values = attention.key(x).view(length, heads, size), attention.value(x).view(length, heads, size)
        q = attention.query(own).view(n, heads, size)
        k_own, v_own = attention.key(own).view(n, heads, size), attention.value(own).view(n, heads, size)
        scores = torch.einsum("nhd,lhd->nhl", q, keys) * size ** -0.5
        scores[:, :, position] = (q * k_own).sum(-1) * size ** -0.5  # the position attends to its own new key
        weights = torch.softmax(scores, dim=-1)
        others = torch.ones(length, dtype=torch.bool, device=x.device)
        others[position] = False
        context = torch.einsum("nhl,lhd->nhd", weights[:, :, others], values[others]) \
            + weights[:, :, position, None] * v_own
        a = block.attention.output(context.reshape(n, heads * size), own)
        return block.output(block.intermediate(a), a)


@dataclass
class Candidates:
    """Step 1's answer: per position and token type, the tokens whose block-0 input passes (best first), and the line
    ends it implies ((length up to [SEP], type): [SEP] passing at that position)."""

    tokens: list[dict[int, list[int]]]
    ends: list[tuple[int, int]]


class EncoderSearch:
    def __init__(self, tau1: float, tau2: float, max_candidates: int, restarts: int, chunk: int, seed: int = 0,
                 shortlist: int = 0):
        self.tau1, self.tau2 = tau1, tau2
        self.max_candidates, self.restarts, self.chunk = max_candidates, restarts, chunk
        self.seed, self.shortlist = seed, shortlist

    def tokens(self, front: EncoderFront, span: Any, cls: int, sep: int, pad: int) -> Candidates | None:
        """Step 1 (stops at the first position where no token of either type passes); None where more than half the
        vocabulary passes at a position (saturated). [CLS] is a line's first token only, [SEP] its last, [PAD] none."""
        out: list[dict[int, list[int]]] = []
        ends: list[tuple[int, int]] = []
        for p in range(front.positions):
            here: dict[int, list[int]] = {}
            for kind in TYPES:
                d = span.distance(front.token_inputs(p, kind))
                hits = torch.nonzero(d < self.tau1).flatten()
                if 2 * len(hits) > len(d):
                    return None
                ranked = hits[torch.argsort(d[hits])].tolist()
                if p > 0 and sep in ranked:
                    ends.append((p, kind))
                here[kind] = ([cls] if cls in ranked else []) if p == 0 else \
                    [t for t in ranked if t not in (cls, sep, pad)]
            if not any(here.values()) and not any(e[0] == p for e in ends):
                break
            out.append(here)
        return Candidates(out, ends)

    def holds_anything(self, front: EncoderFront, span: Any, cls: int, sep: int, probes: int = 64) -> bool:
        """Whether block 1's span holds more than half of ``probes`` random lines of two tokens (seeded): then it
        holds every candidate and step 2 cannot tell lines apart (saturated)."""
        lines = torch.randint(front.vocab, (probes, 2), generator=torch.Generator().manual_seed(0), device="cpu")
        worst = self.distances(front, span, lines.to(front.device), 0, cls, sep).max(1).values
        return 2 * int((worst < self.tau2).sum()) > probes

    def distances(self, front: EncoderFront, span: Any, contents: torch.Tensor, kind: int, cls: int, sep: int
                  ) -> torch.Tensor:
        """Every position's block-1 span distance (n x l+2) of the lines [CLS] ``contents`` (n x l) [SEP]."""
        n = contents.shape[0]
        ids = torch.cat([torch.full((n, 1), cls, device=contents.device), contents,
                         torch.full((n, 1), sep, device=contents.device)], dim=1)
        out = []
        for chunk in ids.split(self.chunk):
            h = front.line_inputs(chunk, kind)
            out.append(span.distance(h.reshape(-1, h.shape[-1])).reshape(h.shape[0], h.shape[1]))
        return torch.cat(out)

    def lines(self, front: EncoderFront, span: Any, found: Candidates, batch_size: int | None, cls: int, sep: int
              ) -> tuple[list[list[int]], list[float], list[bool], dict]:
        """Step 2: for each line end, the exact lines of that length (every position within ``tau2``); where none is
        exact, the closest line found (not exact). Returns the lines' tokens (without [CLS] and [SEP]), their mean
        distances, whether exact, and what the search did."""
        lines: list[list[int]] = []
        scores: list[float] = []
        exact: list[bool] = []
        enumerated = searched = revisits = 0

        def add(hits: list[tuple[float, list[int]]]) -> int:
            """Keep ``hits`` (exact lines); returns how many were not exact before."""
            new = 0
            for score, line in hits:
                if line in lines:  # kept before as a length's closest, not exact then: it is now
                    i = lines.index(line)
                    new += not exact[i]
                    scores[i], exact[i] = score, True
                else:
                    lines.append(line)
                    scores.append(score)
                    exact.append(True)
                    new += 1
            return new

        def keep_closest(closest: tuple[float, list[int]] | None) -> None:
            """Keep a length's closest line, not exact, where it found none (once)."""
            if closest is not None and closest[1] not in lines:
                lines.append(closest[1])
                scores.append(closest[0])
                exact.append(False)

        def known() -> list[list[int]]:
            return [line for line, e in zip(lines, exact) if e]

        def done() -> bool:  # B exact lines: the batch holds no more (the ends left are sums' [SEP]s)
            return bool(batch_size) and sum(exact) >= (batch_size or 0)

        # 1. every end, longest first: a small product enumerated whole, else one descent from each position's best
        # token (a probe). Longest first: a shorter line's search falls into the prefixes of longer ones (a longer
        # line's first tokens are a local minimum), so its starts avoid the tokens of the lines already found
        probes: list[tuple[bool, float, int, list[list[int]]]] = []  # (no line found, its order, type, lists)
        for length, kind in sorted(found.ends, reverse=True):
            lists = [list(found.tokens[p].get(kind, [])) for p in range(1, length)]
            if any(not c for c in lists) or done():
                continue
            size = 1
            for c in lists:
                size *= len(c)
            if size <= self.max_candidates:
                hits, closest = self._enumerate(front, span, lists, kind, cls, sep)
                enumerated += 1
                add(hits)
                if not hits:
                    keep_closest(closest)
                continue
            hits, closest = self._descend(front, span, lists, kind, cls, sep, 1, known(), starts=1)
            add(hits)
            missed = not hits  # the productive lengths longest first, the others by their probe's closest line
            probes.append((missed, (closest[0] if closest else float("inf")) if missed else -length, kind, lists))
        # 2. the searches, best first: the lengths whose probe found a line (true ends), longest first, then the
        # others by their probe's closest line; at random init most ends are sums' [SEP]s (measured: 28 ends for 4
        # lines at BERT-base width), whose probes stay far (mean distance 0.05-0.2 against 0 for a line)
        productive: list[tuple[int, list[list[int]]]] = []  # (type, lists) of the searched lengths that gave lines
        for missed, _, kind, lists in sorted(probes, key=lambda p: p[:2]):
            if done():
                break
            searched += 1
            hits, closest = self._descend(front, span, lists, kind, cls, sep, batch_size or len(found.ends), known(),
                                          attempt=1)
            if add(hits) or not missed:
                productive.append((kind, lists))
            else:
                keep_closest(closest)
        # 3. a search stops after a round of starts finds no new line, which can leave one of a length holding many
        # (measured: 5 of 6 lines of one length, B = 8 at width 256); while fewer than B lines are exact, the
        # lengths that gave lines are searched again from other starts, each move scoring every token on the whole
        # line (the shortlist's cheap score can keep a line's token out of reach)
        for attempt in range(2, REVISITS + 2):
            if not batch_size or done() or not productive:
                break
            new = 0
            for kind, lists in productive:
                revisits += 1
                hits, _ = self._descend(front, span, lists, kind, cls, sep, batch_size - sum(exact), known(), attempt,
                                        shortlist=0)
                new += add(hits)
                if done():
                    break
            if not new:
                break
        return lines, scores, exact, {"line_ends": [list(e) for e in sorted(found.ends)],
                                      "lengths_enumerated": enumerated, "lengths_searched": searched,
                                      "lengths_revisited": revisits}

    def _enumerate(self, front: EncoderFront, span: Any, lists: list[list[int]], kind: int, cls: int, sep: int
                   ) -> tuple[list[tuple[float, list[int]]], tuple[float, list[int]] | None]:
        """Every line of the product of ``lists`` checked: the exact ones and the closest (by mean distance)."""
        hits: list[tuple[float, list[int]]] = []
        closest: tuple[float, list[int]] | None = None
        combos = itertools.product(*lists)
        while batch := list(itertools.islice(combos, self.chunk)):
            d = self.distances(front, span, torch.tensor(batch, dtype=torch.long, device=front.device).reshape(len(batch), len(lists)),
                               kind, cls, sep)
            mean, worst = d.mean(1), d.max(1).values
            i = int(torch.argmin(mean))
            if closest is None or float(mean[i]) < closest[0]:
                closest = (float(mean[i]), list(batch[i]))
            hits += [(float(mean[j]), list(batch[j])) for j in torch.nonzero(worst < self.tau2).flatten().tolist()]
        return sorted(hits), closest

    def _descend(self, front: EncoderFront, span: Any, lists: list[list[int]], kind: int, cls: int, sep: int,
                 most: int, known: list[list[int]], attempt: int = 0, shortlist: int | None = None,
                 starts: int | None = None) -> tuple[list[tuple[float, list[int]]], tuple[float, list[int]] | None]:
        """Coordinate descent over ``lists`` in rounds of ``restarts`` starts, until a round finds no new exact line
        or ``most`` are found. A round descends first on the lists without the tokens of the lines already found here
        and of ``known`` (longer lines found before; where a position has others), then on the whole lists from where
        that ended: with every token open the descents fall back into the found lines' basins (measured: 16 starts
        found 3 of 7 lines of one length), and without the second descent a line that shares a token at a position
        with a found one could not be reached (the reference code's non-overlap filter removes such tokens, and loses
        such lines). ``shortlist``: the moves' (the search's own where None); ``starts``: one round of that many
        starts (a probe) instead."""
        short = self.shortlist if shortlist is None else shortlist
        gen = torch.Generator().manual_seed(self.seed + 1000 * attempt)  # a revisit (``attempt`` > 0): other starts
        hits: list[tuple[float, list[int]]] = []
        closest: tuple[float, list[int]] | None = None
        first = attempt == 0
        while len(hits) < most:
            taken = known + [h[1] for h in hits]
            fresh = [[t for t in c if all(len(k) <= p or k[p] != t for k in taken)] or c for p, c in enumerate(lists)]
            new = 0
            for r in range(starts or self.restarts):
                line = [c[0] if first and r == 0 else c[int(torch.randint(len(c), (1,), generator=gen, device="cpu"))]
                        for c in fresh]
                score, worst = self._sweep(front, span, fresh, line, kind, cls, sep, short) if taken else (0.0, 1.0)
                if worst >= self.tau2:  # not exact without the found lines' tokens: open them all
                    score, worst = self._sweep(front, span, lists, line, kind, cls, sep, short)
                if closest is None or score < closest[0]:
                    closest = (score, list(line))
                if worst < self.tau2 and all(h[1] != line for h in hits) and line not in known:
                    hits.append((score, list(line)))
                    new += 1
            first = False
            if not new or starts:
                break
        return sorted(hits), closest

    def _sweep(self, front: EncoderFront, span: Any, lists: list[list[int]], line: list[int], kind: int, cls: int,
               sep: int, shortlist: int) -> tuple[float, float]:
        """Descend from ``line`` (changed in place): each position in turn takes the token of its list that gives the
        line the lowest mean distance, until a sweep changes nothing or the line is exact (every position within
        ``tau2``: no move can make it more so). With a ``shortlist``, each move tries only the position's shortlisted
        tokens. Returns the mean and the worst distance."""
        score = worst = float("inf")
        for _ in range(SWEEPS):
            moved = False
            for p, full in enumerate(lists):
                c = self._shortlisted(front, span, full, line, p, kind, cls, sep, shortlist)
                trial = torch.tensor(line, dtype=torch.long, device=front.device).repeat(len(c), 1)
                trial[:, p] = torch.tensor(c, dtype=torch.long, device=front.device)
                d = self.distances(front, span, trial, kind, cls, sep)
                i = int(torch.argmin(d.mean(1)))
                if float(d[i].mean()) < score - 1e-12:
                    moved = moved or line[p] != c[i]
                    line[p], score, worst = c[i], float(d[i].mean()), float(d[i].max())
                    if worst < self.tau2:
                        return score, worst
            if not moved:
                break
        return score, worst

    def _shortlisted(self, front: EncoderFront, span: Any, tokens: list[int], line: list[int], p: int, kind: int,
                     cls: int, sep: int, size: int) -> list[int]:
        """The ``size`` tokens of ``tokens`` that bring the changed position (``p`` of the contents, ``p + 1``
        of the line) closest to the span, each scored at that position alone (``position_inputs``); all of them where
        the list is no longer than ``size`` or ``size`` is 0 (every token scored on the whole line)."""
        if not size or len(tokens) <= size:
            return tokens
        ids = torch.tensor([cls, *line, sep], dtype=torch.long, device=front.device)
        d = span.distance(front.position_inputs(ids, kind, p + 1, torch.tensor(tokens, dtype=torch.long,
                                                                              device=front.device)))
        return [tokens[i] for i in torch.topk(d, size, largest=False).indices.tolist()]
