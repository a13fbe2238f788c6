"""The ground truth of a text capture: the client's token ids, their mask, the lines and each sequence's local step.
Only metrics read it; attacks never see it (docs/text.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors, write_safetensors
from fedaudit.io.metadata import SCHEMA_VERSION, Meta, encode

FILE = "text-truth"


@dataclass
class TextTruth:
    ids: torch.Tensor  # int64 [N, T], right-padded
    mask: torch.Tensor  # int64 [N, T]: 1 on the sequence's real tokens
    lines: list[str]  # the client's lines as given (before tokenisation)
    step: torch.Tensor  # int64 [N]: the local step each sequence was used in first
    update_sha256: str | None = None
    lead: int = 0  # framing tokens before each line's text: an encoder's [CLS] (1), none for a decoder
    labels: torch.Tensor | None = None  # int64 [N]: an encoder's class labels

    def sequences(self) -> list[list[int]]:
        """Each line's token ids as the attacks return them: padding removed, and the framing the capture adds left
        out (a decoder's end-of-sequence token, whose position next-token training leaves without gradient; an
        encoder's [CLS] and [SEP]): the client's text."""
        return [row[m.bool()].tolist()[self.lead:-1] for row, m in zip(self.ids, self.mask)]


def save_text_truth(path: str | Path, truth: TextTruth) -> Path:
    meta = encode({"schema_version": SCHEMA_VERSION, "file": FILE, "update_sha256": truth.update_sha256,
                   "lines": truth.lines, "lead": truth.lead or None})  # a decoder's truth: no framing, no key
    tensors = {"input_ids": truth.ids.long(), "attention_mask": truth.mask.long(), "step": truth.step.long()}
    if truth.labels is not None:
        tensors["labels"] = truth.labels.long()
    return write_safetensors(path, tensors, meta)


def load_text_truth(path: str | Path) -> TextTruth:
    tensors, raw = read_safetensors(path, "truth")
    src = f"truth {str(path)!r}"
    meta = Meta(raw, src)
    if meta.str("file") != FILE:
        raise InputError(f"{src} is not the truth of a text capture (it has no input_ids; an image truth?)")
    for key in ("input_ids", "attention_mask"):
        if key not in tensors:
            raise InputError(f"{src} has no {key!r} tensor")
    ids, mask = tensors["input_ids"], tensors["attention_mask"]
    if ids.is_floating_point() or ids.ndim != 2 or ids.numel() == 0 or (ids < 0).any():
        raise InputError(f"{src}: 'input_ids' must be a non-empty [N,T] of non-negative integers")
    if tuple(mask.shape) != tuple(ids.shape) or not ((mask == 0) | (mask == 1)).all():
        raise InputError(f"{src}: 'attention_mask' must be 0/1 and shaped like 'input_ids' {list(ids.shape)}")
    n = ids.shape[0]
    step = tensors.get("step", torch.zeros(n, dtype=torch.long))
    if step.is_floating_point() or step.ndim != 1 or step.numel() != n or (step < 0).any():
        raise InputError(f"{src}: 'step' must be a vector of {n} non-negative integers")
    lines = meta.json("lines", default=None, kind=list)
    if lines is None or len(lines) != n:
        raise InputError(f"{src}: metadata 'lines' must list the {n} lines")
    lead = meta.int("lead", default=0, minimum=0, maximum=ids.shape[1] - 1)
    labels = tensors.get("labels")
    if labels is not None and (labels.is_floating_point() or tuple(labels.shape) != (n,)):
        raise InputError(f"{src}: 'labels' must be a vector of {n} integers")
    return TextTruth(ids.long(), mask.long(), [str(s) for s in lines], step.long(), meta.str("update_sha256"), lead,
                     None if labels is None else labels.long())
