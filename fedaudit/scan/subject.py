"""What a check reads: the checkpoint's tensors by name, and where it could be built, the model and its input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fedaudit.scan.rows import copy_groups


@dataclass
class Subject:
    source: str                                  # the path as given
    kind: str                                    # "image", "text", "state_dict" (tensors only)
    tensors: dict[str, torch.Tensor]             # every floating tensor, by its name in the file
    declared: str | None = None                  # the architecture the file declares (fedaudit.arch, model_type)
    model: nn.Module | None = None               # built from the declaration with the file's weights, when that works
    input_shape: tuple[int, ...] | None = None   # [C, H, W] of an image model
    num_classes: int | None = None
    classifier: str | None = None                # the output layer's weight name, where known
    against_declared: dict[str, list[str]] = field(default_factory=dict)  # unexpected / missing / misshapen names
    probe: torch.Tensor | None = None            # public images shaped like the model's input, in [0, 1]
    probe_source: str = ""
    probe_size: int | None = None                # images of the probe D-SNR reads (None: its default; 0: skip)
    measured: dict[str, Any] = field(default_factory=dict)  # statistics a check measured, finding or not
    notes: list[str] = field(default_factory=list)
    _copies: dict[str, list[list[int]]] = field(default_factory=dict, repr=False)  # copy groups by weight name

    def copies(self, name: str, m: torch.Tensor) -> list[list[int]]:
        """The groups of rows of weight ``name`` (its ``matrices`` view ``m``) that are copies of each other, found
        once for the checks that read them (duplicate rows, bias ladders)."""
        if name not in self._copies:
            self._copies[name] = copy_groups(m)
        return self._copies[name]

    def matrices(self, min_rows: int = 2, min_cols: int = 2):
        """(name, rows x fan-in view) of every weight with rows: linear layers, convolutions (one row per output
        channel), embeddings; GPT-2's Conv1D stores (in, out), so its rows are the transposed matrix's."""
        for name, t in self.tensors.items():
            if t.ndim < 2 or not name.endswith("weight"):
                continue
            m = t.reshape(t.shape[0], -1)
            if _is_conv1d(name, self.kind):
                m = t.t()
            if m.shape[0] >= min_rows and m.shape[1] >= min_cols:
                yield name, m.to(torch.float64 if m.numel() <= 4_000_000 else torch.float32)


def _is_conv1d(name: str, kind: str) -> bool:
    """GPT-2's attention and MLP projections (``transformers.pytorch_utils.Conv1D``) are (in_features, out_features)."""
    return kind == "text" and any(part in name for part in (".c_attn.", ".c_proj.", ".c_fc.", ".q_attn."))
