"""LAMP (Balunović et al., "LAMP: Extracting Text from Gradients with Language Model Priors", NeurIPS 2022): TAG's
continuous matching with a norm prior, alternated with discrete moves of each line's tokens scored by the gradient
distance plus a language model's perplexity.

As the authors' code runs it (the machinery: fedaudit/attacks/text/embedding_matching.py):

* start: the best of ``init-candidates`` N(0, 1) batches by the gradient distance, then of ``init-permutations``
  random reorderings of its positions (one for all lines), every vector rescaled to the embeddings' mean norm rho;
* continuous phase: Adam on the distance (``--loss tag``, LAMP_L1L2, TAG's distance: the default here, measured
  stronger on decoders; ``--loss cos``, LAMP_cos, the paper's headline: the mean over tensors of 1 - cosine)
  plus ``norm-weight`` (mean ||x|| / rho - 1)^2 (the code's (mean ||x|| - rho)^2, made scale-free), the rate times
  ``lr-decay`` every 50 steps, the best iterate kept;
* discrete moves: every ``swap-every`` steps after the first ``swap-burnin`` share, for each line ``swap-candidates``
  reorderings (the identity first, then in turn: swap two tokens, move one token, move a span, move the prefix to the
  end) of its vectors and labels, each scored by the distance with that line reordered plus ``prior-weight`` times
  the prior's mean next-token cross-entropy on its nearest tokens; the best is written back (continuous vectors, not
  snapped to tokens). The identity is a candidate, so a move never raises the score.

The prior. The authors use a GPT-2-shaped LM trained on WikiText-103 with the target's vocabulary, downloaded; fedaudit
downloads nothing. ``--prior model`` (the default) scores with the audited checkpoint's own language-model head,
which shares its tokenizer: a pretrained checkpoint is a real prior, and a random-init one is near-uniform, so its
scores barely differ between orderings and the moves fall back on the distance (the paper's ablation without a
prior). ``--prior none`` drops it. An encoder (a BERT classifier) has no language-model head: its moves use no prior.
A decoder's lines have no special tokens to pin; an encoder's [CLS] and [SEP] are pinned (the moves reorder the
content between them).
LAMP is approximate: its lines are certified only where the recovered batch reproduces the update.
"""

from __future__ import annotations

import torch

from fedaudit.attacks.text.embedding_matching import LOSSES, Matched, MatchingProblem, optimise
from fedaudit.attacks.text.matching_attack import LENGTH, MatchingAttack
from fedaudit.attacks.text.registry import TEXT_ATTACKS
from fedaudit.methods import MethodOption


def reorderings(length: int, count: int, generator: torch.Generator) -> list[list[int]]:
    """``count`` orderings of ``length`` positions: the identity, then LAMP's four moves in turn (swap two positions,
    move one token, move a span, move a prefix to the end)."""
    def pick(lo: int, hi: int) -> int:  # an integer in [lo, hi)
        return int(torch.randint(lo, hi, (1,), generator=generator, device="cpu"))

    out = [list(range(length))]
    for k in range(1, count):
        p = list(range(length))
        if length < 2:
            out.append(p)
            continue
        move = k % 4
        if move == 0:
            i, j = pick(0, length), pick(0, length)
            p[i], p[j] = p[j], p[i]
        elif move == 1:
            token = p.pop(pick(0, length))
            p.insert(pick(0, length), token)
        elif move == 2:
            b = pick(0, length - 1)
            e = pick(b + 1, length + 1)
            span, rest = p[b:e], p[:b] + p[e:]
            at = pick(0, len(rest) + 1)
            p = rest[:at] + span + rest[at:]
        else:
            i = pick(1, length)
            p = p[i:] + p[:i]
        out.append(p)
    return out


@TEXT_ATTACKS.register
class Lamp(MatchingAttack):
    name = "lamp"
    summary = "TAG with a norm prior and discrete reorderings scored by a language model's perplexity: approximate"
    paper = "Balunovic et al., LAMP: Extracting Text from Gradients with Language Model Priors, NeurIPS 2022"
    options = (
        MethodOption("steps", int, 2000, "Adam steps (the authors' LAMP_cos: 2,000)", positive=True, maximum=1_000_000),
        MethodOption("lr", float, 0.1, "Adam's rate, in units of the embedding matrix's standard deviation (TAG's; "
                     "the authors' LAMP used 0.01 on BERT's raw scale)", positive=True),
        MethodOption("lr-decay", float, 0.89, "the rate's factor every 50 steps", positive=True),
        MethodOption("loss", str, "tag", "gradient distance: tag (LAMP_L1L2, the default: on GPT-2 decoders it "
                     "read 73% of tokens where cos read 20-53% at 600 steps, docs/results/text.md), cos (LAMP_cos), "
                     "l2", choices=LOSSES),
        MethodOption("l1", float, 0.01, "the L1 term's weight of the tag distance"),
        MethodOption("norm-weight", float, 1.0, "weight of the embeddings' norm prior (mean ||x|| / rho - 1)^2"),
        MethodOption("init-candidates", int, 500, "random starts scored, the best kept", positive=True,
                     maximum=100_000),
        MethodOption("init-permutations", int, 500, "reorderings of the start's positions tried", maximum=100_000),
        MethodOption("swap-every", int, 75, "steps between two rounds of discrete moves", positive=True),
        MethodOption("swap-burnin", float, 0.1, "share of the steps before the first round", maximum=1.0),
        MethodOption("swap-candidates", int, 200, "reorderings scored per line and round (0: no discrete moves)",
                     maximum=100_000),
        MethodOption("prior", str, "model", "the perplexity prior: model (the checkpoint's own language-model head) "
                     "or none", choices=("model", "none")),
        MethodOption("prior-weight", float, 0.2, "the prior's weight in a move's score (LAMP_cos: 0.2)"),
        LENGTH,
    )

    def match(self, problem: MatchingProblem) -> tuple[Matched, dict]:
        o = self.opts
        u, labels = self._start(problem)
        moves = {"rounds": 0, "moved": 0}

        def between(it: int, u: torch.Tensor, labels: torch.Tensor) -> None:
            if (o["swap-candidates"] and it >= o["swap-burnin"] * o["steps"] and it % o["swap-every"] == 1):
                moves["rounds"] += 1
                moves["moved"] += self.discrete_step(problem, u, labels)

        best = optimise(problem, u, labels, steps=o["steps"], lr=o["lr"], loss=o["loss"], l1=o["l1"],
                        norm_weight=o["norm-weight"], lr_decay=o["lr-decay"], between=between)
        return best, {"prior": self._prior(problem), "discrete_rounds": moves["rounds"], "lines_moved": moves["moved"]}

    def _prior(self, problem: MatchingProblem) -> str:
        """The prior in use: ``--prior``, but none for an encoder (a classifier has no language-model head; the
        authors' prior is a separate LM, downloaded)."""
        return "none" if problem.classes is not None else self.opts["prior"]

    def _score(self, problem: MatchingProblem, u: torch.Tensor, labels: torch.Tensor) -> float:
        with torch.enable_grad():
            return float(problem.distance(problem.gradient(u, labels, False), self.opts["loss"], self.opts["l1"]))

    def _start(self, problem: MatchingProblem) -> tuple[torch.Tensor, torch.Tensor]:
        """The best random start, the best reordering of it, rescaled to norm rho (module docstring)."""
        u, labels = problem.start()
        best = self._score(problem, u, labels)
        for _ in range(self.opts["init-candidates"] - 1):
            cand = problem.start()[0]
            if (s := self._score(problem, cand, labels)) < best:
                u, best = cand, s
        for _ in range(self.opts["init-permutations"]):
            perm = torch.randperm(problem.length, device="cpu").to(u.device)  # drawn on the host
            if (s := self._score(problem, u[:, perm], labels)) < best:
                u, best = u[:, perm], s
        return u / u.norm(dim=-1, keepdim=True) * (problem.rho / problem.sigma), labels

    def discrete_step(self, problem: MatchingProblem, u: torch.Tensor, labels: torch.Tensor) -> int:
        """One round of moves on every line, in place; returns how many lines moved. A candidate's score is the
        distance with that line reordered (the other lines' share of the gradient kept) plus the prior's term."""
        o = self.opts
        moved = 0
        with torch.enable_grad():
            for s in range(problem.batch_size):
                whole = problem.gradient(u, labels, False)
                own = problem.gradient(u[s:s + 1], labels[s:s + 1], False, rows=[s])
                rest = [w - g for w, g in zip(whole, own)]
                perms = reorderings(problem.length, o["swap-candidates"], torch.Generator().manual_seed(
                    int(torch.randint(2**31 - 1, (1,), device="cpu"))))
                scores = []
                for p in perms:
                    g = problem.gradient(u[s:s + 1, p], labels[s:s + 1, p], False, rows=[s])
                    scores.append(float(problem.distance([r + x for r, x in zip(rest, g)], o["loss"], o["l1"])))
                if self._prior(problem) == "model" and o["prior-weight"]:
                    ids = problem.nearest_tokens(u[s])[torch.tensor(perms, device=u.device)]
                    if problem.start_id is not None:  # the prior reads the line as the client framed it
                        ids = torch.cat([torch.full((len(ids), 1), problem.start_id, device=ids.device), ids], dim=1)
                    scores = [a + o["prior-weight"] * b for a, b in zip(scores, _perplexity(problem.model, ids))]
                best = min(range(len(perms)), key=lambda i: (scores[i], i))
                if best:
                    with torch.no_grad():
                        u[s] = u[s, perms[best]]
                        labels[s] = labels[s, perms[best]]
                    moved += 1
        return moved


def _perplexity(model: torch.nn.Module, ids: torch.Tensor) -> list[float]:
    """Each row's mean next-token cross-entropy under ``model`` (log-perplexity)."""
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return ce.mean(1).tolist()
