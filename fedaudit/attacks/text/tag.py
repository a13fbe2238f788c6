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

import torch

from fedaudit.attacks.text.embedding_matching import (
    CERTIFY_RESIDUAL,
    LOSSES,
    MatchingProblem,
    certify,
    optimise,
    read_back,
    sequence_length,
)
from fedaudit.attacks.text.registry import TEXT_ATTACKS
from fedaudit.attacks.text.result import TextResult
from fedaudit.errors import NotApplicable
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.methods import Method, MethodOption

LENGTH = MethodOption("length", int, 0, "the dummy lines' length T (0: from the position embedding's gradient, the "
                      "last position with a non-zero row plus one)")


def matching_reasons(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], local_steps: int) -> list[str]:
    """Why gradient matching on embeddings cannot run on this update (TAG's and LAMP's shared conditions)."""
    reasons = []
    if ckpt.kind != "decoder":
        reasons.append(f"the {ckpt.model_type} loss is not implemented (decoders' next-token loss only)")
    embedding = ckpt.model.get_input_embeddings().weight
    if not any(n in gradients for n, p in ckpt.model.named_parameters() if p is not embedding):
        reasons.append("the update shares no gradient besides the input embeddings'")
    if local_steps != 1:
        reasons.append(f"matches one gradient (FedSGD); this update has {local_steps} local steps")
    return reasons


@TEXT_ATTACKS.register
class Tag(Method):
    name = "tag"
    summary = "gradient matching on input embeddings (L2 + L1 distance), nearest tokens read back: approximate"
    paper = "Deng et al., TAG: Gradient Attack on Transformer-based Language Models, Findings of EMNLP 2021"
    options = (
        MethodOption("steps", int, 2500, "Adam steps (the authors' baseline: 2,500)", positive=True),
        MethodOption("lr", float, 0.1, "Adam's rate, in units of the embedding matrix's standard deviation",
                     positive=True),
        MethodOption("loss", str, "tag", "gradient distance: tag (L2 + l1 * L1), cos (1 - cosine per tensor), l2",
                     choices=LOSSES),
        MethodOption("l1", float, 0.01, "the L1 term's weight of the tag distance (the authors' baseline: 0.01)"),
        LENGTH,
    )

    def __init__(self, **opts):
        self.opts = self.parse_options(opts)

    @staticmethod
    def reasons(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], local_steps: int = 1) -> list[str]:
        return matching_reasons(ckpt, gradients, local_steps)

    def run(self, ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], batch_size: int | None,
            local_steps: int = 1) -> TextResult:
        if why := self.reasons(ckpt, gradients, local_steps):
            raise NotApplicable("; ".join(why))
        o = self.opts
        length, length_from = sequence_length(ckpt, gradients, o["length"])
        problem = MatchingProblem.build(ckpt, gradients, batch_size, length)
        u, labels = problem.start()  # the global generator, which the job seeds
        best = optimise(problem, u, labels, steps=o["steps"], lr=o["lr"], loss=o["loss"], l1=o["l1"])
        sequences = read_back(problem, best.u, best.labels, ckpt.eos_id)
        return matched_result(ckpt, gradients, sequences, best, matching_diagnostics(problem, best, length_from))


def matched_result(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], sequences: list[list[int]], best,
                   diagnostics: dict) -> TextResult:
    """TAG's and LAMP's result: every line certified where the recovered batch reproduces the update
    (embedding_matching.certify), none otherwise."""
    residual = certify(ckpt, gradients, sequences)
    exact = residual < CERTIFY_RESIDUAL
    return TextResult(sequences, [exact] * len(sequences), [best.objective] * len(sequences),
                      {**diagnostics, "reproduces_update": exact, "recovered_batch_residual": residual,
                       "certifies": exact})


def matching_diagnostics(problem: MatchingProblem, best, length_from: str) -> dict:
    """What a matching run reports (TAG and LAMP)."""
    return {"length": problem.length, "length_from": length_from, "steps": best.steps, "objective": best.objective,
            "interrupted": best.interrupted, "matched_tensors": len(problem.names), "excluded": problem.excluded,
            "labels": "optimised jointly (next-token labels are the unknown tokens)",
            "objective_history": best.history[:: max(1, len(best.history) // 50)]}
