"""The ground-truth file (images in [0,1] and labels). Only metrics read it; attacks never see it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors, write_safetensors
from fedaudit.io.metadata import SCHEMA_VERSION, Meta, encode

if TYPE_CHECKING:
    from fedaudit.io.text_truth import TextTruth


@dataclass
class Truth:
    images: torch.Tensor  # [N, C, H, W] float32 in [0, 1]
    labels: torch.Tensor  # int64 [N]
    step: torch.Tensor  # int64 [N]: the local batch index each image belongs to
    names: list[str]
    update_sha256: str | None = None

    def step_labels(self, local_steps: int) -> torch.Tensor:
        """The labels behind the averaged gradient: each local step's batch, in order (batches cycle)."""
        batches = int(self.step.max()) + 1
        return torch.cat([self.labels[self.step == k % batches] for k in range(local_steps)])


def save_truth(path: str | Path, truth: Truth) -> Path:
    meta = encode({"schema_version": SCHEMA_VERSION, "file": "truth", "update_sha256": truth.update_sha256,
                   "names": truth.names})
    return write_safetensors(path, {"images": truth.images.float(), "labels": truth.labels.long(),
                                    "step": truth.step.long()}, meta)


def load_truth(path: str | Path) -> Truth:
    tensors, raw = read_safetensors(path, "truth")
    src = f"truth {str(path)!r}"
    for key in ("images", "labels"):
        if key not in tensors:
            raise InputError(f"{src} has no {key!r} tensor")
    x, y = tensors["images"].float(), tensors["labels"]
    if x.ndim != 4 or x.numel() == 0:
        raise InputError(f"{src}: 'images' must be a non-empty [N,C,H,W], got {list(x.shape)}")
    if not torch.isfinite(x).all() or x.min() < 0 or x.max() > 1:
        raise InputError(f"{src}: 'images' must be finite and in [0,1]")
    if y.is_floating_point() or y.dtype == torch.bool or y.ndim != 1 or y.numel() != x.shape[0] or (y < 0).any():
        raise InputError(f"{src}: 'labels' must be a vector of {x.shape[0]} non-negative integers")
    meta = Meta(raw, src)
    names = meta.json("names", default=None, kind=list) or [f"{i:03d}" for i in range(x.shape[0])]
    step = tensors.get("step", torch.zeros(x.shape[0], dtype=torch.long))
    if step.is_floating_point() or step.ndim != 1 or step.numel() != x.shape[0] or (step < 0).any():
        raise InputError(f"{src}: 'step' must be a vector of {x.shape[0]} non-negative integers (each image's local step)")
    if len(names) != x.shape[0]:
        raise InputError(f"{src}: metadata 'names' lists {len(names)} names for {x.shape[0]} images")
    return Truth(x, y.long(), step.long(), [str(n) for n in names], meta.str("update_sha256"))


TRUTH_MISMATCH = ("error", "warn")


def check_truth(truth: Truth | TextTruth, update_sha256: str | None, policy: str = "error") -> str | None:
    """Whether ``truth`` was captured with the update under audit: its recorded ``update_sha256`` against the update
    file's. A truth of another update would measure that update's images against this one's reconstruction and
    band it "low": an error by default; with ``policy`` "warn" the mismatch is returned as a warning to report."""
    if policy not in TRUTH_MISMATCH:
        raise InputError(f"--truth-mismatch must be one of {', '.join(TRUTH_MISMATCH)}, got {policy!r}")
    if not truth.update_sha256 or not update_sha256 or truth.update_sha256 == update_sha256:
        return None
    why = (f"the truth was captured with another update (its recorded sha256 {truth.update_sha256[:12]}..., this "
           f"update's {update_sha256[:12]}...): its images are not this update's batch")
    if policy == "error":
        raise InputError(why + "; pass --truth-mismatch warn to measure against it anyway")
    return why
