"""A text capture job: what a client fine-tuning a language model would upload from a file of lines (one sequence a
line), written as an update and a text truth file (docs/text.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedaudit.client.text_capture import capture_text_update
from fedaudit.device import resolve_device
from fedaudit.errors import InputError
from fedaudit.io.files import read_input_text, sha256_file
from fedaudit.io.text_adapter import load_text_model
from fedaudit.io.text_truth import TextTruth, save_text_truth
from fedaudit.io.update import save_update
from fedaudit.report.types import TextCaptureSummary, build


def read_lines(path: Path) -> list[str]:
    """The file's non-blank lines (UTF-8), without their line ends."""
    text = read_input_text(path, "text lines file")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InputError(f"{str(path)!r} holds no text lines")
    return lines


@dataclass
class TextCaptureJob:
    checkpoint: Path
    text: Path
    batch_size: int
    local_steps: int = 1
    lr: float | None = None
    max_length: int = 32
    momentum: float = 0.0
    weight_decay: float = 0.0
    seed: int = 0
    base: Path | None = None  # the base model's folder when ``checkpoint`` is a LoRA adapter folder
    device: str = "cpu"  # where the client's steps run (--device; the CPU by default, as for images)

    def run_to(self, output: Path, truth: Path | None = None) -> dict[str, Any]:
        torch.manual_seed(self.seed)
        device = resolve_device(self.device)
        ckpt = load_text_model(self.checkpoint, self.base)
        lines = read_lines(self.text)
        ckpt.model.to(device)
        cap = capture_text_update(ckpt, lines, self.batch_size, self.local_steps, self.lr, self.max_length,
                                  self.momentum, self.weight_decay)
        save_update(output, {k: v.cpu() for k, v in cap.tensors.items()}, cap.meta)
        update_sha = sha256_file(output)
        if truth is not None:
            save_text_truth(truth, TextTruth(cap.batch.ids, cap.batch.mask, lines, cap.step, update_sha, ckpt.lead,
                                             cap.batch.labels))
        return build(TextCaptureSummary, {
            "modality": "text", "update": str(output), "sha256": update_sha, "truth": str(truth) if truth else None,
            "kind": cap.meta.kind, "batch_size": self.batch_size, "local_steps": self.local_steps,
            "num_examples": len(lines), "max_length": self.max_length, "tensors": len(cap.tensors),
            "lines": [{"line": i + 1, "tokens": n, "step": int(s)}
                      for i, (n, s) in enumerate(zip(cap.batch.lengths, cap.step.tolist()))]})
