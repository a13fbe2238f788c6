"""Shared fixtures: the CLI runner, the shipped sample updates, and small freshly made checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from fedaudit.cli.app import app
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, cifar10_samples
from fedaudit.io.checkpoint import save_checkpoint
from fedaudit.models import ModelSpec, build_model

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_updates"
SAMPLE_NAMES = sorted(p.name for p in SAMPLES.iterdir() if (p / "update.safetensors").exists())
CIFAR_SPEC = ModelSpec("lenet", 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD)


class Cli:
    """In-process CLI calls with separate stdout/stderr and no colour."""

    def __init__(self):
        self.runner = CliRunner()

    def __call__(self, *args, expect: int | None = 0):
        result = self.runner.invoke(app, [str(a) for a in args], env={"NO_COLOR": "1", "COLUMNS": "120"})
        if expect is not None:
            assert result.exit_code == expect, (result.exit_code, result.stdout, result.stderr, result.exception)
        return result

    @staticmethod
    def json(result):
        return json.loads(result.stdout)


@pytest.fixture
def cli() -> Cli:
    return Cli()


def run_module(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    """``python -m fedaudit ...`` in a subprocess (what a shell pipeline sees)."""
    return subprocess.run([sys.executable, "-m", "fedaudit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, env={"NO_COLOR": "1", "COLUMNS": "120", "PATH": "/usr/bin:/bin"}, timeout=300)


def sample(name: str) -> tuple[Path, Path, Path]:
    folder = SAMPLES / name
    return folder / "checkpoint.safetensors", folder / "update.safetensors", folder / "truth.safetensors"


@pytest.fixture(scope="session")
def cifar():
    return cifar10_samples()


@pytest.fixture
def lenet_ckpt(tmp_path) -> Path:
    torch.manual_seed(0)
    path = tmp_path / "lenet.safetensors"
    save_checkpoint(path, build_model(CIFAR_SPEC), CIFAR_SPEC)
    return path


def assert_one_error_line(stderr: str, *fragments: str) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("fedaudit: error:"), stderr
    assert "Traceback" not in stderr
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])
