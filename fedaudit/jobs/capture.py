"""A capture job: what a client would upload from a batch of images, written as an update and a truth file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedaudit.client.capture import Capture, CaptureConfig, capture_update
from fedaudit.errors import InputError
from fedaudit.io.checkpoint import load_checkpoint
from fedaudit.io.files import sha256_file
from fedaudit.io.images import labels_from_csv, load_images, parse_labels
from fedaudit.io.truth import Truth, save_truth
from fedaudit.io.update import save_update
from fedaudit.report.types import CaptureSummary, build
from fedaudit.session import Session


@dataclass
class CaptureJob:
    session: Session
    checkpoint: Path
    images: Path  # a folder of image files, one image, or .safetensors with 'images' (and 'labels')
    labels: str | None  # '3,8,8,0', 'names', or None when the images file carries them
    config: CaptureConfig
    resize: bool = False
    labels_csv: Path | None = None  # a 'file,label' CSV instead of ``labels``

    def run_to(self, output: Path, truth: Path | None = None) -> dict[str, Any]:
        """Record the upload to ``output`` (and the ground truth to ``truth``); returns what ``capture`` prints."""
        torch.manual_seed(self.session.seed)
        ckpt = load_checkpoint(self.checkpoint, allow_custom_arch=self.session.allow_custom_arch)
        batch = load_images(self.images, ckpt.spec.input_shape, resize=self.resize)
        if self.labels_csv is not None and self.labels is not None:
            raise InputError("give either --image-labels or --image-labels-csv, not both")
        y = (labels_from_csv(self.labels_csv, batch, ckpt.spec.num_classes) if self.labels_csv is not None
             else parse_labels(self.labels, batch, ckpt.spec.num_classes))
        dev = self.session.device
        cap: Capture = capture_update(ckpt.model.to(dev), ckpt.spec, batch.images.to(dev), y.to(dev), self.config,
                                      base_sha256=ckpt.sha256)
        save_update(output, cap.tensors, cap.meta)
        update_sha = sha256_file(output)
        if truth is not None:
            save_truth(truth, Truth(batch.images, y, cap.step, batch.names, update_sha))
        return build(CaptureSummary, {"update": str(output), "sha256": update_sha, "truth": str(truth) if truth else None,
                "kind": cap.meta.kind, "batch_size": self.config.batch_size, "local_steps": self.config.local_steps,
                "num_examples": len(batch.names), "tensors": len(cap.tensors), "withheld": list(self.config.withhold),
                # which file got which label, in the client's data order (folders are read in sorted name order)
                "images": [{"file": name, "label": int(label), "step": int(step)}
                           for name, label, step in zip(batch.names, y.tolist(), cap.step.tolist())]})
