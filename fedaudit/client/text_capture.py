"""Record what a client fine-tuning a language model would upload from a batch of text lines.

FedSGD, next-token prediction: each line is tokenised, cut to ``max_length - 1`` tokens and ended with the
end-of-sequence token (as causal-LM fine-tuning data is prepared, so the last word is predicted too), right-padded with
that token; the loss is the mean cross-entropy over the real tokens (padding is masked out of attention and loss). The
upload is the gradient of every parameter, keyed by the model's ``state_dict`` names, as the recorded-update format
(docs/formats.md) stores image models' updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedaudit import __version__
from fedaudit.errors import InputError
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.io.update import UpdateMeta


@dataclass
class TextBatch:
    """Token ids (B x T, right-padded), the attention mask, and each sequence's real length."""

    ids: torch.Tensor
    mask: torch.Tensor
    lengths: list[int]


def tokenize_lines(ckpt: TextCheckpoint, lines: list[str], max_length: int) -> TextBatch:
    """The client's batch: each line's tokens (at most ``max_length - 1``) and the end-of-sequence token."""
    if not lines:
        raise InputError("no text lines to capture")
    if max_length < 2:
        raise InputError(f"--max-length must be at least 2, not {max_length}")
    limit = int(ckpt.model.config.n_positions)
    if max_length > limit:
        raise InputError(f"--max-length {max_length} exceeds the model's {limit} positions")
    eos = ckpt.eos_id
    seqs = []
    for i, line in enumerate(lines):
        tokens = ckpt.tokenizer.encode(line).ids[: max_length - 1]
        if not tokens:
            raise InputError(f"text line {i + 1} is empty after tokenisation")
        seqs.append([*tokens, eos])
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), eos, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return TextBatch(ids, mask, [len(s) for s in seqs])


def next_token_loss(model: torch.nn.Module, batch: TextBatch) -> torch.Tensor:
    """The batch-mean next-token cross-entropy over the real tokens (padding masked out)."""
    labels = batch.ids.masked_fill(batch.mask == 0, -100)
    return model(input_ids=batch.ids, attention_mask=batch.mask, labels=labels).loss


def text_gradient(ckpt: TextCheckpoint, batch: TextBatch) -> dict[str, torch.Tensor]:
    """The gradient of :func:`next_token_loss` on ``batch``, by state_dict name."""
    model = ckpt.model.eval()  # dropout off: the server's forward is the client's (DAGER's exact checks need it)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    grads = torch.autograd.grad(next_token_loss(model, batch), list(params.values()), allow_unused=True)
    return {n: g.detach().contiguous() for n, g in zip(params, grads) if g is not None}


def capture_text_gradient(ckpt: TextCheckpoint, lines: list[str], max_length: int = 32) -> tuple[dict[str, torch.Tensor], UpdateMeta, TextBatch]:
    """The FedSGD upload of one batch of ``lines``: (tensors by state_dict name, metadata, the batch itself)."""
    batch = tokenize_lines(ckpt, lines, max_length)
    tensors = text_gradient(ckpt, batch)
    meta = UpdateMeta(kind="gradient", reduction="mean", batch_size=len(lines), local_steps=1,
                      num_examples=len(lines), base_checkpoint_sha256=ckpt.sha256,
                      source={"tool": f"fedaudit {__version__}", "task": "next-token", "max_length": max_length})
    return tensors, meta, batch
