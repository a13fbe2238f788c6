"""What the tests share besides fixtures: paths, the in-process CLI runner, sample loading, assertions."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from typer.testing import CliRunner

from fedaudit.attacks.base import OptimizationAttack
from fedaudit.cli.app import app
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD
from fedaudit.io.truth import Truth, load_truth
from fedaudit.jobs import ReconstructJob
from fedaudit.metrics.labels import label_metrics
from fedaudit.models import ModelSpec
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_updates"
# the image samples (the text sample, gpt2_tiny_b4, holds a model folder: tests/test_text_cli.py reads it)
SAMPLE_NAMES = sorted(p.name for p in SAMPLES.iterdir() if (p / "checkpoint.safetensors").exists())
CIFAR_SPEC = ModelSpec("lenet", 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD)


# four lines of a client's text (tests/test_text*.py)
TEXT_LINES = ["The quick brown fox jumps over the lazy dog.", "Federated learning keeps data on the device.",
              "Gradients can leak the text they were computed on.", "A reviewer audits every recorded update."]


def text_adapter(tiny, folder, r, fresh=False, base_named="tiny"):
    """A LoRA adapter folder of rank ``r`` on the GPT-2 folder ``tiny`` (fine-tuned B, or ``fresh``: B = 0)."""
    from fedaudit.io.text_adapter import save_text_adapter
    from fedaudit.io.text_checkpoint import load_text_checkpoint
    from fedaudit.models.text_tiny import add_lora

    ckpt = load_text_checkpoint(tiny)
    config = add_lora(ckpt, r=r, fresh=fresh)
    return save_text_adapter(folder, ckpt, {**config, "base_model_name_or_path": base_named})


class Cli:
    """In-process CLI calls with separate stdout/stderr and no colour."""

    def __init__(self):
        try:  # Click < 8.2 mixes stderr into stdout unless told not to; 8.2 dropped the argument
            self.runner = CliRunner(mix_stderr=False)
        except TypeError:
            self.runner = CliRunner()

    def __call__(self, *args, expect: int | None = 0):
        # no proxy batches unless a test asks (--proxies N): they multiply an attack's cost by N + 1; no progress
        # lines (a loaded machine would print them into stderr that tests read; tests/test_progress.py asks for them)
        result = self.runner.invoke(app, [str(a) for a in args], env={"NO_COLOR": "1", "COLUMNS": "120",
                                                                        "FEDAUDIT_PROXIES": "0", "FEDAUDIT_PROGRESS": "off"})
        if expect is not None:
            assert result.exit_code == expect, (result.exit_code, result.stdout, result.stderr, result.exception)
        return result

    @staticmethod
    def json(result):
        return json.loads(result.stdout)


def run_module(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    """``python -m fedaudit ...`` in a subprocess (what a shell pipeline sees)."""
    return subprocess.run([sys.executable, "-m", "fedaudit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, env={"NO_COLOR": "1", "COLUMNS": "120", "PATH": "/usr/bin:/bin", "FEDAUDIT_PROXIES": "0",
                               "FEDAUDIT_PROGRESS": "off"},
                          timeout=300)


def start_long_reconstruct(tmp_path: Path, **popen_kwargs) -> tuple[subprocess.Popen, Path, Path]:
    """``fedaudit reconstruct ig`` on the LeNet sample with a budget it never finishes, in a real process, returned
    once it has written its first resume checkpoint: (process, report folder, checkpoint file)."""
    ckpt, upd, _ = sample("lenet_b1")
    out, marker = tmp_path / "out", tmp_path / "out.checkpoint.safetensors"
    proc = subprocess.Popen([sys.executable, "-m", "fedaudit", "reconstruct", "ig", str(ckpt), str(upd), "-o", str(out),
                             "-n", "1000000", "--checkpoint-every", "20", "-q"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen_kwargs)
    deadline = time.time() + 120
    while not marker.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert marker.exists(), proc.stderr.read() if proc.poll() is not None else "no checkpoint"
    return proc, out, marker


def sample(name: str) -> tuple[Path, Path, Path]:
    folder = SAMPLES / name
    return folder / "checkpoint.safetensors", folder / "update.safetensors", folder / "truth.safetensors"


def load_sample(name: str, session: Session | None = None) -> tuple[ThreatModel, Truth]:
    """A shipped sample's threat model (loaded under ``session``) and its ground truth."""
    ckpt, upd, truth = sample(name)
    return (session or Session()).load_threat_model(ckpt, upd), load_truth(truth)


def attack_job(name: str, attack: str, options: dict | None = None, loop: dict | None = None,
               session: Session | None = None, **policy) -> tuple[ReconstructJob, OptimizationAttack, list[int]]:
    """A job for ``attack`` on a shipped sample with its true labels (tests of an attack's objective and of the
    loop), the attack it builds, and the labels: ``job.optimize(attack, labels)`` runs it."""
    session = session or Session()
    tm, truth = load_sample(name, session)
    labels = truth.labels.tolist()
    job = ReconstructJob(session, tm, attack, options, loop, given_labels=labels, **policy)
    return job, job.build(labels), labels


def assert_one_error_line(stderr: str, *fragments: str) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("fedaudit: error:"), stderr
    assert "Traceback" not in stderr
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])


def insacc(result, y) -> float:
    """InsAcc of a label result against the true labels ``y`` (10 classes)."""
    return label_metrics(result.counts_int, torch.bincount(y, minlength=10))["InsAcc"]


def assert_regenerated(new: Path, old: Path, tolerance: float = 1e-5) -> None:
    """A regenerated sample folder's ``update.safetensors`` and ``truth.safetensors`` against the shipped ones: the
    same bytes, or (a CPU whose BLAS/convolution kernels sum in another order: seen on a Sapphire Rapids machine with
    the AVX2 pin of conftest.py in place, the samples being recorded on AMD EPYC) the same metadata, names, dtypes
    and shapes, every entry of the update within ``tolerance`` times its largest entry (rounding moves float32 tensors
    by an ulp or two; the scale is the update's, not each tensor's: a bias before a train-mode BatchNorm has a zero
    gradient in exact arithmetic, its entries are rounding noise; a recipe of several steps through a max-pool can
    flip an argmax and carry it forward) and the truth identical but for the update's hash."""
    from fedaudit.io.files import read_safetensors

    if (new / "update.safetensors").read_bytes() == (old / "update.safetensors").read_bytes():
        assert (new / "truth.safetensors").read_bytes() == (old / "truth.safetensors").read_bytes()
        return
    (a, meta_a), (b, meta_b) = (read_safetensors(d / "update.safetensors", "update") for d in (new, old))
    assert meta_a == meta_b and a.keys() == b.keys()
    scale = max(float(v.abs().max()) for v in b.values())
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert float((a[k].double() - b[k].double()).abs().max()) <= tolerance * scale, k
    (ta, tmeta_a), (tb, tmeta_b) = (read_safetensors(d / "truth.safetensors", "truth") for d in (new, old))
    assert {k: v for k, v in tmeta_a.items() if k != "fedaudit.update_sha256"} == \
        {k: v for k, v in tmeta_b.items() if k != "fedaudit.update_sha256"}
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def plain_and_placed(run):
    """``run()``'s result, then its result with PyTorch's default device set to ``meta`` (a device that holds shapes
    only): a tensor the run makes without saying where lands there and fails against the CPU's, as on a GPU it would
    land on the CPU beside the model's CUDA tensors (tests/test_*_device.py)."""
    plain = run()
    with torch.device("meta"):
        return plain, run()


def same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """The same names and, for each, the same values."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def timeless(doc):
    """A JSON document without its timings and creation time (two runs of the same work take different times)."""
    if isinstance(doc, dict):
        return {k: timeless(v) for k, v in doc.items() if k not in ("timings", "seconds", "timing_s", "created_at")
                and not k.endswith("_seconds") and k != "seconds_per_iteration"}
    if isinstance(doc, list):
        return [timeless(v) for v in doc]
    return doc
