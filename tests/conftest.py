"""Fixtures: the CLI runner, the real CIFAR-10 samples, a fresh LeNet checkpoint.

The CPU kernels are pinned to AVX2 before torch loads: the shipped samples were recorded with them, and on an
AVX-512 machine oneDNN's other kernels change float sums enough to move a max-pool's argmax (the ConvNet sample
then differs by 1e-3 relative), so byte-for-byte and exactness tests would fail for reasons that are not bugs.
"""

from __future__ import annotations

import os

os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
# One torch thread in every process the tests start too (the CLI in subprocesses, the README's fork server, a round's
# workers): beside the other pytest-xdist worker a second OpenMP thread per process oversubscribes the cores, and
# OpenMP's spinning threads then made the README's blocks take 131 s instead of 40-49 s in the suite.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from fedaudit.data.offline import cifar10_samples  # noqa: E402
from fedaudit.io.checkpoint import save_checkpoint  # noqa: E402
from fedaudit.models import build_model  # noqa: E402

from .helpers import CIFAR_SPEC, Cli  # noqa: E402
from .mnist_lenet import digit_split, trained_lenet  # noqa: E402

# One thread per process: the suite runs one pytest-xdist worker per core (README), and the numbers the tests assert
# were measured single-threaded (trained fixtures, exactness); torch's float sums can differ with the thread count.
torch.set_num_threads(1)


@pytest.fixture
def cli() -> Cli:
    return Cli()


@pytest.fixture(scope="session")
def cifar():
    return cifar10_samples()


@pytest.fixture(scope="session")
def digits():
    """Victim pool (4,000 MNIST digits of a seeded shuffle) and 50 aux digits per class from the rest, never both."""
    return digit_split()


@pytest.fixture(scope="session")
def sure_lenet(digits):
    """A DLG LeNet trained 4 epochs at lr 3e-3 on digits the victims never are: trained-like outputs (softmax spread
    >= 0.3). Shared by the label tests; none of them changes it."""
    x, y, _ = digits
    return trained_lenet(x, y, lr=3e-3, epochs=4)


@pytest.fixture
def lenet_ckpt(tmp_path) -> Path:
    torch.manual_seed(0)
    path = tmp_path / "lenet.safetensors"
    save_checkpoint(path, build_model(CIFAR_SPEC), CIFAR_SPEC)
    return path


@pytest.fixture(autouse=True)
def stdout_documents_follow_their_schema(monkeypatch):
    """Every typed stdout document a test makes (fedaudit/report/types.py) and every record written into an output
    folder (report.json, audit.json, audit_round.json: fedaudit/report/schema.py ``RECORDS``) is validated against
    its published JSON Schema (docs/schema/) as it is written (issue 66)."""
    from fedaudit.io import files
    from fedaudit.jobs import audit, audit_round
    from fedaudit.report import write
    from fedaudit.report.schema import RECORDS
    from fedaudit.report.types import STDOUT_SCHEMA_VERSION

    from .schemas import validate

    real = files.dumps_json
    record_of = {"reconstruct": "report", "score": "report", "audit": "audit-record", "audit-round": "round-record"}

    def checked(obj, *args, **kwargs):
        text = real(obj, *args, **kwargs)
        if isinstance(obj, dict) and "tool" in obj:  # a record in an output folder (new_report's head)
            name = "text-report" if obj.get("modality") == "text" else record_of[obj["command"]]
            assert obj.get("schema_version") == RECORDS[name][1]
            validate(name, text)
        elif isinstance(obj, dict) and obj.get("schema_version") == STDOUT_SCHEMA_VERSION:
            validate(obj["command"] + ("-text" if obj.get("modality") == "text" else ""), text)
        return text

    monkeypatch.setattr(files, "dumps_json", checked)
    monkeypatch.setattr(write, "dumps_json", checked)  # report.json's writer holds its own reference
    monkeypatch.setattr(audit, "dumps_json", checked)  # and audit.json's
    monkeypatch.setattr(audit_round, "dumps_json", checked)  # and audit_round.json's


@pytest.fixture(scope="session")
def tokenizer():
    """The offline byte-level BPE tokenizer (2,000 entries) of the text tests (tests/test_text*.py)."""
    pytest.importorskip("transformers")
    from fedaudit.models.text_tiny import train_tokenizer

    return train_tokenizer(2000)


@pytest.fixture(scope="session")
def tiny(tokenizer, tmp_path_factory):
    """A GPT-2 folder (width 64, two blocks, random init) for that tokenizer."""
    from fedaudit.io.text_checkpoint import save_text_checkpoint
    from fedaudit.models.text_tiny import gpt2

    return save_text_checkpoint(tmp_path_factory.mktemp("gpt2") / "tiny", gpt2(tokenizer, width=64), tokenizer)
