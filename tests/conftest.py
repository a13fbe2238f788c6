"""Fixtures: the CLI runner, the real CIFAR-10 samples, a fresh LeNet checkpoint.

The CPU kernels are pinned to AVX2 before torch loads: the shipped samples were recorded with them, and on an
AVX-512 machine oneDNN's other kernels change float sums enough to move a max-pool's argmax (the ConvNet sample
then differs by 1e-3 relative), so byte-for-byte and exactness tests would fail for reasons that are not bugs.
"""

from __future__ import annotations

import os

os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from fedaudit.data.offline import cifar10_samples  # noqa: E402
from fedaudit.io.checkpoint import save_checkpoint  # noqa: E402
from fedaudit.models import build_model  # noqa: E402

from .helpers import CIFAR_SPEC, Cli  # noqa: E402


@pytest.fixture
def cli() -> Cli:
    return Cli()


@pytest.fixture(scope="session")
def cifar():
    return cifar10_samples()


@pytest.fixture
def lenet_ckpt(tmp_path) -> Path:
    torch.manual_seed(0)
    path = tmp_path / "lenet.safetensors"
    save_checkpoint(path, build_model(CIFAR_SPEC), CIFAR_SPEC)
    return path
