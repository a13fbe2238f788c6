"""TAG (Deng et al., "TAG: Gradient Attack on Transformer-based Language Models", Findings of EMNLP 2021): gradient
matching on a language model's input embeddings with an L2 + weighted L1 distance, the nearest tokens read back.

The shared machinery (fedaudit/attacks/text/embedding_matching.py) says what is matched and how; this module is the
paper's recipe as its authors' baseline code runs it (the LAMP repository's ``tag.sh``): one N(0, 1) start, Adam at a
constant rate 0.1 (here in units of the embedding's standard deviation), 2,500 steps, the distance
sum_j ||g'_j - g_j||^2 + 0.01 ||g'_j - g_j||_1 over the shared tensors, the best iterate kept. The paper's per-layer
weighting of the L1 term was not available; breaching's linear weights are its own guess, and the unweighted form
is used. TAG is approximate: its lines are certified only where the recovered batch reproduces the update
(embedding_matching.certify; docs/text.md, "TAG and LAMP").
"""

from __future__ import annotations

from fedaudit.attacks.text.embedding_matching import LOSSES, Matched, MatchingProblem, optimise
from fedaudit.attacks.text.matching_attack import LENGTH, MatchingAttack
from fedaudit.attacks.text.registry import TEXT_ATTACKS
from fedaudit.methods import MethodOption


@TEXT_ATTACKS.register
class Tag(MatchingAttack):
    name = "tag"
    summary = "gradient matching on input embeddings (L2 + L1 distance), nearest tokens read back: approximate"
    paper = "Deng et al., TAG: Gradient Attack on Transformer-based Language Models, Findings of EMNLP 2021"
    options = (
        MethodOption("steps", int, 2500, "Adam steps (the authors' baseline: 2,500)", positive=True, maximum=1_000_000),
        MethodOption("lr", float, 0.1, "Adam's rate, in units of the embedding matrix's standard deviation",
                     positive=True),
        MethodOption("loss", str, "tag", "gradient distance: tag (L2 + l1 * L1), cos (1 - cosine per tensor), l2",
                     choices=LOSSES),
        MethodOption("l1", float, 0.01, "the L1 term's weight of the tag distance (the authors' baseline: 0.01)"),
        LENGTH,
    )

    def match(self, problem: MatchingProblem) -> tuple[Matched, dict]:
        o = self.opts
        u, labels = problem.start()  # the global generator, which the job seeds
        return optimise(problem, u, labels, steps=o["steps"], lr=o["lr"], loss=o["loss"], l1=o["l1"]), {}
