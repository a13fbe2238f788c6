"""``--device auto|cpu|cuda|cuda:N``: auto picks CUDA when present; an explicit CUDA without one is an error."""

from __future__ import annotations

import torch

from fedaudit.errors import InputError


def resolve_device(name: str = "auto") -> torch.device:
    name = (name or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise InputError(f"--device {name}: CUDA is not available on this machine (use --device cpu or auto)")
        dev = torch.device(name)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) present")
        return dev
    raise InputError(f"--device must be auto, cpu, cuda or cuda:N, got {name!r}")
