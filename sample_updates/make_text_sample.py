"""Regenerate sample_updates/gpt2_tiny_b4/, the text sample: a GPT-2-shaped decoder at random init (width 96, two
blocks) with a byte-level BPE tokenizer trained offline on the standard library's docstrings, and the FedSGD gradient of
four lines of text (next-token loss, at most 24 tokens each).

    .venv/bin/python sample_updates/make_text_sample.py

The folder: checkpoint/ (config.json, model.safetensors, tokenizer.json: a Hugging Face model folder), lines.txt (the
client's text), update.safetensors, truth.safetensors (the lines' tokens; only metrics read it). The tokenizer is
trained on the running Python's docstrings, so the files regenerate byte for byte only on the same Python minor
version, torch and tokenizers (these were made on Python 3.11), computed on one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# the same float sums on every x86 machine, as sample_updates/make_samples.py (set before torch loads)
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

import torch  # noqa: E402

from fedaudit.io.text_checkpoint import save_text_checkpoint  # noqa: E402
from fedaudit.jobs.text_capture import TextCaptureJob  # noqa: E402
from fedaudit.models.text_tiny import gpt2, train_tokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent
NAME = "gpt2_tiny_b4"
LINES = ["Patient 4411 was admitted on Monday with chest pain.",
         "Please wire the remaining balance to account 7730.",
         "My new password is the name of my first dog.",
         "The meeting with the lawyers moved to Thursday."]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=HERE, help="where to write the sample folder")
    out = ap.parse_args(argv).out / NAME
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # one reduction order for the gradient's sums, whatever the machine's cores
    tokenizer = train_tokenizer(2000)
    save_text_checkpoint(out / "checkpoint", gpt2(tokenizer, width=96, seed=0), tokenizer)
    (out / "lines.txt").write_text("\n".join(LINES) + "\n")
    for f in ("update.safetensors", "truth.safetensors"):
        (out / f).unlink(missing_ok=True)
    summary = TextCaptureJob(out / "checkpoint", out / "lines.txt", batch_size=4, max_length=24).run_to(
        out / "update.safetensors", out / "truth.safetensors")
    print(json.dumps({k: summary[k] for k in ("update", "sha256", "kind", "batch_size")}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
