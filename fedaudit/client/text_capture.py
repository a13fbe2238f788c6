"""Record what a client fine-tuning a language model would upload from a batch of text lines.

Next-token prediction (a decoder): each line is tokenised, cut to ``max_length - 1`` tokens and ended with the
end-of-sequence token (as causal-LM fine-tuning data is prepared, so the last word is predicted too), right-padded with
that token; the loss is the mean cross-entropy over the real tokens (padding is masked out of attention and loss).
Sequence classification (an encoder): each line is ``LABEL<TAB>TEXT``, framed as [CLS] tokens [SEP] (at most
``max_length`` in all) and right-padded with the pad token; the loss is the batch-mean cross-entropy of the labels.
FedSGD uploads the gradient of every parameter on one batch of B lines; FedAvg (K local steps) uploads the weights'
change after K SGD steps, each on the next B lines (cycling), as image captures do (fedaudit/client/capture.py). Both
are keyed by the model's ``state_dict`` names, as the recorded-update format (docs/formats.md) stores image models'
updates.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from fedaudit import __version__
from fedaudit.client.capture import check_recipe
from fedaudit.client.local_sgd import sgd_steps
from fedaudit.errors import InputError
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.io.update import UpdateMeta


@dataclass
class TextBatch:
    """Token ids (B x T, right-padded), the attention mask, and each sequence's real length."""

    ids: torch.Tensor
    mask: torch.Tensor
    lengths: list[int]
    labels: torch.Tensor | None = None  # int64 [B]: an encoder's class labels (None: next-token prediction)

    def rows(self, part: slice) -> "TextBatch":
        return TextBatch(self.ids[part], self.mask[part], self.lengths[part],
                         None if self.labels is None else self.labels[part])

    def on(self, model: torch.nn.Module) -> "TextBatch":
        """The batch on ``model``'s device (batches are made on the host: the truth file and the metrics read them)."""
        device = next(model.parameters()).device
        return TextBatch(self.ids.to(device), self.mask.to(device), self.lengths,
                         None if self.labels is None else self.labels.to(device))


def tokenize_lines(ckpt: TextCheckpoint, lines: list[str], max_length: int) -> TextBatch:
    """The client's batch: a decoder's lines' tokens and the end-of-sequence token (after the beginning-of-sequence
    token where the family has one: LLaMA); an encoder's ``LABEL<TAB>TEXT`` lines as [CLS] tokens [SEP] with their
    labels; at most ``max_length`` tokens a line in all."""
    if not lines:
        raise InputError("no text lines to capture")
    framing = ckpt.lead + 1  # an encoder's [CLS] or a LLaMA's BOS, and the end token
    if max_length < framing + 1:
        raise InputError(f"--max-length must be at least {framing + 1}, not {max_length}")
    limit = ckpt.positions
    if max_length > limit:
        raise InputError(f"--max-length {max_length} exceeds the model's {limit} positions")
    labels = None
    if ckpt.kind == "encoder":
        labels, lines = split_labels(lines, int(ckpt.model.config.num_labels))
    seqs = []
    for i, line in enumerate(lines):
        # add_special_tokens=False: the framing is the client's ([CLS]/[SEP] here), whatever the tokenizer's template
        tokens = ckpt.tokenizer.encode(line, add_special_tokens=False).ids[: max_length - framing]
        if not tokens:
            raise InputError(f"text line {i + 1} is empty after tokenisation")
        seqs.append(tokens)
    return client_batch(ckpt, seqs, labels)


def client_batch(ckpt: TextCheckpoint, sequences: list[list[int]], labels: torch.Tensor | None = None) -> TextBatch:
    """Token-id lines framed as the client frames them for ``ckpt``'s family (its start token, end token and pad)."""
    return ended_batch(sequences, ckpt.eos_id, start=ckpt.start_id, pad=ckpt.pad_id, labels=labels)


def split_labels(lines: list[str], classes: int) -> tuple[torch.Tensor, list[str]]:
    """A classification file's lines, ``LABEL<TAB>TEXT`` (LABEL an integer class in [0, classes)): the labels and
    the texts."""
    labels, texts = [], []
    for i, line in enumerate(lines):
        label, tab, text = line.partition("\t")
        if not tab or not label.strip().lstrip("-").isdigit():
            raise InputError(f"text line {i + 1}: a classifier's lines are LABEL<TAB>TEXT (an integer class, a tab, "
                             f"the text), not {line[:40]!r}")
        if not 0 <= int(label) < classes:
            raise InputError(f"text line {i + 1}: label {int(label)} is not a class of the model's {classes} "
                             f"(0..{classes - 1})")
        labels.append(int(label))
        texts.append(text)
    return torch.tensor(labels, dtype=torch.long, device="cpu"), texts


def ended_batch(sequences: list[list[int]], eos: int, start: int | None = None, pad: int | None = None,
                labels: torch.Tensor | None = None) -> TextBatch:
    """A batch of token-id lines as the client prepares them: each ended with the end token ``eos`` (and begun with
    ``start`` where given: an encoder's [CLS]), right-padded with ``pad`` (default ``eos``), the padding masked."""
    seqs = [[*([start] if start is not None else []), *s, eos] for s in sequences]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), eos if pad is None else pad, dtype=torch.long, device="cpu")
    mask = torch.zeros((len(seqs), width), dtype=torch.long, device="cpu")
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, device="cpu")
        mask[i, : len(s)] = 1
    return TextBatch(ids, mask, [len(s) for s in seqs], labels)


def next_token_loss(model: torch.nn.Module, batch: TextBatch) -> torch.Tensor:
    """The batch-mean next-token cross-entropy over the real tokens (padding masked out)."""
    batch = batch.on(model)
    labels = batch.ids.masked_fill(batch.mask == 0, -100)
    return model(input_ids=batch.ids, attention_mask=batch.mask, labels=labels).loss


def classification_loss(model: torch.nn.Module, batch: TextBatch) -> torch.Tensor:
    """The batch-mean cross-entropy of an encoder's labels (one sentence a line: token type 0, padding masked)."""
    batch = batch.on(model)
    return model(input_ids=batch.ids, attention_mask=batch.mask, token_type_ids=torch.zeros_like(batch.ids),
                 labels=batch.labels).loss


def client_loss(model: torch.nn.Module, batch: TextBatch) -> torch.Tensor:
    """The client's loss: classification where the batch has labels (an encoder), else next-token prediction."""
    return next_token_loss(model, batch) if batch.labels is None else classification_loss(model, batch)


def text_gradient(ckpt: TextCheckpoint, batch: TextBatch) -> dict[str, torch.Tensor]:
    """The gradient of the client's loss on ``batch`` for every trainable parameter (a LoRA model's: its adapters),
    by the model's parameter name."""
    model = ckpt.model.eval()  # dropout off: the server's forward is the client's (DAGER's exact checks need it)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    grads = torch.autograd.grad(client_loss(model, batch), list(params.values()), allow_unused=True)
    return {n: g.detach().contiguous() for n, g in zip(params, grads) if g is not None}


def capture_text_gradient(ckpt: TextCheckpoint, lines: list[str], max_length: int = 32) -> tuple[dict[str, torch.Tensor], UpdateMeta, TextBatch]:
    """The FedSGD upload of one batch of ``lines``: (tensors by state_dict name, metadata, the batch itself)."""
    cap = capture_text_update(ckpt, lines, len(lines), max_length=max_length)
    return cap.tensors, cap.meta, cap.batch


@dataclass
class TextCapture:
    tensors: dict[str, torch.Tensor]
    meta: UpdateMeta
    batch: TextBatch  # every line, tokenised (the truth)
    step: torch.Tensor  # int64 [N]: the local step each line is first used in


def capture_text_update(ckpt: TextCheckpoint, lines: list[str], batch_size: int, local_steps: int = 1,
                        lr: float | None = None, max_length: int = 32, momentum: float = 0.0,
                        weight_decay: float = 0.0) -> TextCapture:
    """What a client uploads from ``lines``: the gradient of one batch (K = 1, exactly B lines) or, for K > 1, the
    delta (local minus global weights) after K SGD steps at ``lr`` (heavy-ball ``momentum``, ``weight_decay``), batch
    k being lines kB..(k+1)B (cycling)."""
    n = len(lines)
    check_recipe(n, batch_size, local_steps, "gradient" if local_steps == 1 else "delta", lr, "text lines", momentum,
                 weight_decay)
    batch = tokenize_lines(ckpt, lines, max_length)
    step = torch.arange(n, device="cpu") // batch_size
    task = "classification" if ckpt.kind == "encoder" else "next-token"
    source = {"tool": f"fedaudit {__version__}", "task": task, "max_length": max_length}
    if local_steps == 1:
        meta = UpdateMeta(kind="gradient", reduction="mean", batch_size=batch_size, local_steps=1, num_examples=n,
                          base_checkpoint_sha256=ckpt.sha256, source=source)
        tensors = {ckpt.update_key(k): v for k, v in text_gradient(ckpt, batch).items()}
        return TextCapture(tensors, meta, batch, step)
    nb = n // batch_size
    model = ckpt.model.eval()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    rows = [slice((k % nb) * batch_size, (k % nb + 1) * batch_size) for k in range(local_steps)]
    parts = (batch.rows(r) for r in rows)
    assert lr is not None  # check_recipe refused a delta without it
    try:
        sgd_steps(model, (functools.partial(client_loss, model, part) for part in parts), lr, momentum,
                  weight_decay)
        names = {n for n, p in model.named_parameters() if p.requires_grad}
        after = model.state_dict()
        # tied weights (GPT-2's output matrix is its embedding) appear once, under the parameter's own name
        tensors = {ckpt.update_key(k): (after[k] - start[k]).detach().contiguous().clone() for k in names}
    finally:
        model.load_state_dict(start)  # the checkpoint stays the global model
        model.zero_grad(set_to_none=True)
    meta = UpdateMeta(kind="delta", delta_sign="local_minus_global", batch_size=batch_size, local_steps=local_steps,
                      local_lr=lr, num_examples=n, base_checkpoint_sha256=ckpt.sha256, source=source,
                      optimizer={"name": "sgd", "momentum": momentum, "weight_decay": weight_decay})
    return TextCapture(tensors, meta, batch, step)
