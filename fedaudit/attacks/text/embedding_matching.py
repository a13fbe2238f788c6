"""Gradient matching on a language model's input embeddings, the machinery TAG and LAMP share (docs/text.md).

The server optimises a dummy batch of continuous input embeddings ``x`` (B x T x d, fed to the model as
``inputs_embeds``) and, because a next-token loss's labels are the unknown tokens themselves, a dummy label
distribution per position (B x T x V logits, optimised jointly: breaching's TAG does so; the LAMP code feeds the true
labels of its classification tasks, which a server does not have). The dummy's gradient of the client's loss (the
mean next-token cross-entropy) is compared with the update's, tensor by tensor, and the distance is minimised by Adam
through the gradient (second-order autograd). Each position is read back as the vocabulary entry nearest to its
vector by cosine (the LAMP code's rule; breaching's squared norms bias toward short rows).

Choices the papers leave open, made here and documented:

* **Which tensors.** Every shared parameter except the input embedding matrix: the dummy enters as embeddings, so the
  matrix's input-side gradient has no dummy counterpart (the LAMP code skips it likewise). GPT-2 ties its output
  matrix to that embedding, so its output-side gradient is left out with it.
* **The sequence length T.** A position's embedding gradient is zero unless some line has a predicted token after it,
  so the last position with a non-zero row of ``transformer.wpe.weight``'s gradient plus one is the batch's padded
  length (``--length`` overrides it; an update that withholds that gradient, e.g. LoRA-only, needs it). Every dummy
  line is T long: lines shorter than T (padded by the client) are not modelled (the LAMP code assumes the lengths
  known; a server does not).
* **A start token (LLaMA).** A decoder whose client begins every line with a beginning-of-sequence token has its
  dummy lines begin with that token's embedding, pinned; the T - 1 positions after it are optimised, and each is a
  predicted token (its label is optimised with it). Rotary positions leave no position embedding to read T from:
  ``--length`` gives it (the client's padded length, the start token included).
* **Encoders (BERT classifiers).** A dummy line is ``[CLS] x_1 .. x_{T-2} [SEP]``: the framing tokens' embeddings are
  pinned and only the content is optimised (the LAMP code pins them likewise); the token types are 0, as the client's.
  The labels are the lines' classes, given by the job (counted from the classifier's bias gradient by the bias-count
  rule: fedaudit/labels/text_classes.py) and held fixed; the LAMP code feeds the true labels, which a server does
  not have. Read-back
  skips the special tokens. All T positions of a classifier's line have a gradient, so T is the last non-zero row
  of the position embedding's gradient plus one.
* **Scale.** Variables are in units of the embedding matrix's standard deviation (x = sigma u, u ~ N(0, 1) at the
  start), so one learning rate serves models whose embeddings are 0.02 (GPT-2) or 0.05 (BERT) per entry; the papers'
  rates are for BERT's raw scale.

A run keeps its best iterate by its objective and stops on Ctrl-C with that best (``interrupted``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from fedaudit.errors import NotApplicable
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.models.attention import differentiable_attention
from fedaudit.models.text_families import FAMILIES
from fedaudit.progress import advance
from fedaudit.text_threat_model import shown_length

LOSSES = ("tag", "cos", "l2")


def sequence_length(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], given: int = 0) -> tuple[int, str]:
    """The dummy's length T and where it came from (module docstring); NotApplicable where it cannot be read."""
    limit = ckpt.positions
    if given:
        if given < 2 or given > limit:
            raise NotApplicable(f"--length {given} is outside 2..{limit} (the model's positions)")
        return given, "--length"
    positions = FAMILIES[ckpt.model_type].positions
    if positions is None:
        raise NotApplicable(f"needs the sequence length: {ckpt.model_type}'s rotary positions leave no position "
                            "embedding to read it from; give --length T (the padded length, the start token included)")
    if positions not in gradients:
        raise NotApplicable(f"needs the sequence length: the update withholds the position embedding's gradient "
                            f"({positions}); give --length T")
    length = shown_length(ckpt, gradients)
    if length is None:
        raise NotApplicable(f"needs the sequence length: the position embedding's gradient ({positions}) is zero")
    return length, "the position embedding's gradient"


NOTHING_TO_MATCH = "the update shares no gradient besides the input embeddings'"


def matched_parameters(model: Any, gradients: dict[str, torch.Tensor]) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters whose shared gradients are matched: every one but the input embedding matrix (module
    docstring)."""
    embedding = model.get_input_embeddings().weight
    return [(n, p) for n, p in model.named_parameters() if n in gradients and p is not embedding]


@dataclass
class MatchingProblem:
    """A model, the update's gradients it is matched against, and the dummy batch's shape and scale."""

    model: torch.nn.Module
    names: list[str]
    params: list[torch.nn.Parameter]
    targets: list[torch.Tensor]
    batch_size: int
    length: int
    embedding: torch.Tensor  # V x d, detached
    sigma: float  # the embedding matrix's standard deviation: the unit of the variables
    rho: float  # the mean norm of the embedding's rows (LAMP's norm prior)
    excluded: list[str]
    classes: torch.Tensor | None = None  # an encoder's: each dummy line's class (fixed); None for a decoder
    frame: tuple[torch.Tensor, torch.Tensor] | None = None  # an encoder's pinned [CLS] and [SEP] embeddings
    specials: tuple[int, ...] = ()  # token ids read-back skips (an encoder's special tokens)
    start_id: int | None = None  # a decoder's pinned start token (LLaMA's beginning of sequence); None for GPT-2

    @classmethod
    def build(cls, ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], batch_size: int | None,
              length: int, classes: torch.Tensor | None = None) -> MatchingProblem:
        """``classes``: an encoder's batch labels, one per line (the job counts them)."""
        if not batch_size:
            raise NotApplicable("needs the batch size (the update's fedaudit.batch_size, or --batch-size)")
        if ckpt.kind == "encoder" and (classes is None or len(classes) != batch_size):
            raise NotApplicable("needs the batch's labels (fedaudit reconstruct counts them from the classifier's "
                                "bias gradient)")
        model = ckpt.model.eval()
        # the fused attention kernels have no second derivative; the eager path computes the same attention
        model.set_attn_implementation("eager")
        embedding = model.get_input_embeddings().weight
        excluded = [n for n, p in model.named_parameters() if p is embedding and n in gradients]
        pairs = matched_parameters(model, gradients)
        if not pairs:
            raise NotApplicable(NOTHING_TO_MATCH)
        e = embedding.detach().float()
        problem = cls(model, [n for n, _ in pairs], [p for _, p in pairs],
                      [gradients[n].detach().float() for n, _ in pairs], int(batch_size), length, e,
                      float(e.std()), float(e.norm(dim=1).mean()), excluded)
        if ckpt.kind == "encoder":  # the content between the pinned [CLS] and [SEP] is optimised
            assert classes is not None and ckpt.start_id is not None
            problem.length = length - 2
            problem.classes = classes.long().to(e.device)  # counted on the host; the loss meets them on the model's
            problem.frame = (e[ckpt.start_id], e[ckpt.eos_id])
            others = {ckpt.tokenizer.token_to_id(t) for t in ("[UNK]", "[MASK]")}
            problem.specials = tuple(sorted({ckpt.start_id, ckpt.eos_id, ckpt.pad_id}
                                            | {i for i in others if i is not None}))
        elif ckpt.start_id is not None:  # a decoder's pinned start token: the T - 1 positions after it are optimised
            problem.length, problem.start_id, problem.specials = length - 1, ckpt.start_id, (ckpt.start_id,)
        return problem

    def gradient(self, u: torch.Tensor, labels: torch.Tensor, create_graph: bool, rows: list[int] | None = None
                 ) -> tuple[torch.Tensor, ...]:
        """The dummy's gradient of the mean next-token cross-entropy (soft labels ``softmax(labels)``) over ``u``'s
        rows, as the client's loss is a mean over the batch's predicted tokens. For a subset of the batch's lines
        the result is scaled to that subset's share of the whole batch's gradient (``len(u) / batch_size``). An
        encoder's: the classes' cross-entropy of the framed lines (``labels`` unused: the classes are fixed), ``rows``
        their lines' indices in the batch (0..len(u)-1 by default)."""
        if self.classes is not None:
            return self._encoder_gradient(u, create_graph, rows)
        x = self.sigma * u
        if self.start_id is not None:  # every position after the pinned start token is predicted
            x = torch.cat([self.embedding[self.start_id].expand(len(u), 1, u.shape[-1]), x], dim=1)
            target = torch.softmax(labels, dim=-1)
        else:  # the first token is predicted from nothing
            target = torch.softmax(labels[:, 1:], dim=-1)
        with differentiable_attention():  # differentiated twice (fedaudit/models/attention.py)
            logits = self.model(inputs_embeds=x).logits
        loss = -(target * torch.log_softmax(logits[:, :-1], dim=-1)).sum(-1).mean() * (len(u) / self.batch_size)
        return torch.autograd.grad(loss, self.params, create_graph=create_graph)

    def _encoder_gradient(self, u: torch.Tensor, create_graph: bool, rows: list[int] | None) -> tuple[torch.Tensor, ...]:
        assert self.classes is not None and self.frame is not None
        n, d = u.shape[0], u.shape[-1]
        cls, sep = (v.expand(n, 1, d) for v in self.frame)
        x = torch.cat([cls, self.sigma * u, sep], dim=1)
        classes = self.classes[rows if rows is not None else list(range(n))]
        with differentiable_attention():
            logits = self.model(inputs_embeds=x, token_type_ids=torch.zeros(x.shape[:2], dtype=torch.long,
                                                                            device=x.device)).logits
        loss = F.cross_entropy(logits, classes) * (n / self.batch_size)
        return torch.autograd.grad(loss, self.params, create_graph=create_graph)

    def distance(self, grads, kind: str, l1: float) -> torch.Tensor:
        """TAG's sum over tensors of ||d||^2 + l1 ||d||_1 (the LAMP code's form), LAMP_cos's mean over tensors of
        1 - cos, or the plain squared distance."""
        pairs = list(zip(grads, self.targets))
        if kind == "cos":
            return torch.stack([1 - F.cosine_similarity(g.flatten(), t.flatten(), dim=0, eps=1e-12)
                                for g, t in pairs]).mean()
        total = torch.stack([(g - t).pow(2).sum() for g, t in pairs]).sum()
        if kind == "tag":
            total = total + l1 * torch.stack([(g - t).abs().sum() for g, t in pairs]).sum()
        return total

    def nearest_tokens(self, u: torch.Tensor) -> torch.Tensor:
        """Each position's vocabulary entry nearest by cosine (B x T ids)."""
        x = F.normalize(u.detach().float(), dim=-1)
        sim = x @ F.normalize(self.embedding, dim=-1).T
        if self.specials:
            sim[..., list(self.specials)] = -float("inf")
        return sim.argmax(-1)

    def start(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """An N(0, 1) batch (in units of sigma) and uniform labels (an encoder's are its fixed classes: an empty
        per-position label variable)."""
        # drawn on the host (the same start on every device), then moved to the model's
        u = torch.randn(self.batch_size, self.length, self.embedding.shape[1], generator=generator, device="cpu")
        vocab = 0 if self.classes is not None else self.embedding.shape[0]
        device = self.embedding.device
        return u.to(device), torch.zeros(self.batch_size, self.length, vocab, device=device)


@dataclass
class Matched:
    u: torch.Tensor
    labels: torch.Tensor
    objective: float
    steps: int
    interrupted: bool
    history: list[float]


def optimise(problem: MatchingProblem, u: torch.Tensor, labels: torch.Tensor, *, steps: int, lr: float, loss: str,
             l1: float = 0.01, norm_weight: float = 0.0, lr_decay: float = 1.0,
             between: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None) -> Matched:
    """Adam on (u, labels) against the gradient distance (+ ``norm_weight`` (mean ||x|| / rho - 1)^2, LAMP's norm
    prior in a scale-free form), the rate times ``lr_decay`` every 50 steps; ``between(it, u, labels)`` may change the
    variables in place after a step (LAMP's discrete moves). Returns the best iterate by objective."""
    u, labels = u.clone().requires_grad_(True), labels.clone().requires_grad_(True)
    opt = torch.optim.Adam([u, labels], lr=lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, 50, gamma=lr_decay)
    best = Matched(u.detach().clone(), labels.detach().clone(), float("inf"), 0, False, [])
    it = 0
    try:
        for it in range(steps):
            objective = problem.distance(problem.gradient(u, labels, True), loss, l1)
            if norm_weight:
                objective = objective + norm_weight * (problem.sigma * u.norm(dim=-1).mean() / problem.rho - 1) ** 2
            value = float(objective.detach())
            if not torch.isfinite(objective):
                break
            if value < best.objective:
                best.u, best.labels, best.objective = u.detach().clone(), labels.detach().clone(), value
            best.history.append(value)
            opt.zero_grad(set_to_none=True)
            objective.backward()
            opt.step()
            sched.step()
            if between is not None:
                with torch.no_grad():
                    between(it, u, labels)
            advance(it + 1, steps)
        it = steps
    except KeyboardInterrupt:
        best.interrupted = True
    best.steps = it
    return best


def read_back(problem: MatchingProblem, u: torch.Tensor, labels: torch.Tensor, eos: int) -> list[list[int]]:
    """Each dummy line's tokens, cut before its first end-of-sequence token (the client ends every line with one). A
    position's token is its vector's nearest entry, but the last position's: nothing is predicted from it, so its
    vector is free, while its label (the target of the position before) is not: the label's most likely entry. The
    labels are not used to cut a line short: mid-line they put the end token where no line ends (on the sample at
    600 steps, two of four lines were cut early and ROUGE-1 fell)."""
    ids = problem.nearest_tokens(u)
    if problem.classes is not None:  # an encoder's content, framing left out: nothing to cut
        return ids.tolist()
    ids[:, -1] = labels[:, -1].argmax(-1)
    return [row[: row.index(eos)] if eos in row else row for row in ids.tolist()]


CERTIFY_RESIDUAL = 1e-4  # float32 recomputation of the same batch lands near 1e-6; a token off moves it by far more


def certify(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], sequences: list[list[int]],
            classes: torch.Tensor | None = None) -> float:
    """The relative distance between the update and the gradient of the recovered lines captured as the client
    captures (each line ended with the end token, padded with it, masked), over every shared tensor, the
    embeddings' included. Below CERTIFY_RESIDUAL the recovered batch reproduces the update: it is the client's batch
    (or one no gradient can tell from it), which certifies every line, as DAGER's checks certify its lines. One
    gradient; infinity where a line is empty or longer than the model's positions. An encoder's lines are framed
    [CLS] .. [SEP] and labelled ``classes``."""
    from fedaudit.client.text_capture import client_batch, text_gradient  # the client's loss, recomputed by the server

    if not sequences or any(not s for s in sequences) or max(map(len, sequences)) + ckpt.lead + 1 > ckpt.positions:
        return float("inf")
    with torch.enable_grad():
        mine = text_gradient(ckpt, client_batch(ckpt, sequences, classes))
    return relative_residual(mine, gradients)


def relative_residual(mine: dict[str, torch.Tensor], recorded: dict[str, torch.Tensor]) -> float:
    """|mine - recorded| / |recorded| over the tensors both hold (in float64; infinity where they hold nothing):
    how far a recomputed upload is from the recorded one (``certify``; a delta's replay, local_replay.py)."""
    shared = [k for k in recorded if k in mine]
    num = sum(float((mine[k].double() - recorded[k].double()).pow(2).sum()) for k in shared)
    den = sum(float(recorded[k].double().pow(2).sum()) for k in shared)
    return (num / den) ** 0.5 if den > 0 else float("inf")
