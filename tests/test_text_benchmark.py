"""benchmarks.text_leakage on a given Hugging Face folder (issue 68: "a pretrained model when a user-provided folder
is given"): its own tokenizer, width and layers, rows written where --out says."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("rouge_score")

from fedaudit.io.text_checkpoint import save_text_checkpoint  # noqa: E402
from fedaudit.models.text_tiny import gpt2  # noqa: E402


def test_the_benchmark_runs_its_rows_on_a_given_folder(tokenizer, tmp_path):
    from benchmarks.text_leakage import main

    folder = save_text_checkpoint(tmp_path / "given", gpt2(tokenizer, width=64, layers=2, heads=2), tokenizer)
    out = tmp_path / "rows.jsonl"
    assert main(["--checkpoint", str(folder), "--B", "2", "--T", "12", "--seeds", "0,1", "--threads", "1",
                 "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["seed"] for r in rows] == [0, 1]  # the seed draws the lines; the model is the folder's
    assert all(r["width"] == 64 and r["layers"] == 2 and r["update"] == "full gpt2 folder given" for r in rows)
    assert all(r["exact_rate"] == 1.0 and r["certified"] == 2 for r in rows)  # 2 lines, well under the width
