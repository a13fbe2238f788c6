"""What TAG and LAMP share as attacks: their applicability, the ``--length`` option, one run (the problem built, the
attack's own optimisation, the lines read back) and one result (certified where the recovered batch reproduces the
update). Each attack supplies only ``match``: how it starts and optimises (fedaudit/attacks/text/tag.py, lamp.py)."""

from __future__ import annotations

import torch

from fedaudit.attacks.text.embedding_matching import (
    CERTIFY_RESIDUAL,
    NOTHING_TO_MATCH,
    Matched,
    MatchingProblem,
    certify,
    matched_parameters,
    read_back,
    sequence_length,
)
from fedaudit.attacks.text.result import TextResult
from fedaudit.errors import NotApplicable
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.methods import Method, MethodOption
from fedaudit.models.text_families import FAMILIES
from fedaudit.text_threat_model import LocalRound

LENGTH = MethodOption("length", int, 0, "the dummy lines' length T, a start token included (0: from the position "
                      "embedding's gradient, the last position with a non-zero row plus one; rotary-position models "
                      "such as LLaMA have none and need it)")


class MatchingAttack(Method):
    """A gradient-matching attack on a language model's input embeddings (a decoder's or a BERT classifier's)."""

    uses_labels = True  # a classifier's batch labels (the job counts them)

    def __init__(self, **opts):
        self.opts = self.parse_options(opts)

    @staticmethod
    def reasons(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], local_steps: int = 1) -> list[str]:
        """Why gradient matching on embeddings cannot run on this update."""
        reasons = []
        head = FAMILIES[ckpt.model_type].head_bias
        if head is not None and head not in gradients:
            why = "a LoRA-only update does not carry it" if ckpt.adapter is not None else "the update withholds it"
            reasons.append(f"needs the classifier's bias gradient ({head}) to count the batch's labels (the bias-count "
                           f"rule); {why}")
        if not matched_parameters(ckpt.model, gradients):
            reasons.append(NOTHING_TO_MATCH)
        if local_steps != 1:
            reasons.append(f"matches one gradient (FedSGD); this update has {local_steps} local steps")
        return reasons

    def match(self, problem: MatchingProblem) -> tuple[Matched, dict]:
        """The attack's optimisation: its best iterate and what it adds to the diagnostics."""
        raise NotImplementedError

    def run(self, ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], batch_size: int | None,
            local_steps: int = 1, local: LocalRound | None = None, labels: torch.Tensor | None = None) -> TextResult:
        """``labels``: a classifier's batch labels, one per line (the job counts them: fedaudit/labels/text_classes.py)."""
        if why := self.reasons(ckpt, gradients, local_steps):
            raise NotApplicable("; ".join(why))
        length, length_from = sequence_length(ckpt, gradients, self.opts["length"])
        problem = MatchingProblem.build(ckpt, gradients, batch_size, length, labels)
        best, extra = self.match(problem)
        sequences = read_back(problem, best.u, best.labels, ckpt.eos_id)
        # every line certified where the recovered batch reproduces the update (embedding_matching.certify)
        residual = certify(ckpt, gradients, sequences, problem.classes)
        exact = residual < CERTIFY_RESIDUAL
        return TextResult(sequences, [exact] * len(sequences), [best.objective] * len(sequences), {
            "length": problem.length, "length_from": length_from, "steps": best.steps, "objective": best.objective,
            "interrupted": best.interrupted, "matched_tensors": len(problem.names), "excluded": problem.excluded,
            "labels": "optimised jointly (next-token labels are the unknown tokens)" if problem.classes is None else
                      f"given (counted from the classifier's bias gradient): {problem.classes.tolist()}",
            "objective_history": best.history[:: max(1, len(best.history) // 50)], **extra,
            "reproduces_update": exact, "recovered_batch_residual": residual, "certifies": exact})
