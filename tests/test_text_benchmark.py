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
    assert all(r["device"] == "cpu" for r in rows)  # where the attack ran (--device)


def test_the_trained_stand_in_learns_from_text_the_attacks_never_read(tmp_path):
    """benchmarks.text_pretrain: its training paragraphs hold none of the attacked sentences, its folder is a
    checkpoint fedaudit reads, and a few steps lower the next-token loss on the training text (the record says by
    how much, and on the held-out sentences)."""
    from benchmarks.text_leakage import sentences
    from benchmarks.text_pretrain import main, training_text
    from fedaudit.io.text_checkpoint import load_text_checkpoint

    paragraphs, modules = training_text()
    attacked = set(sentences())
    assert modules and not any(s.rstrip(".") + "." in attacked for p in paragraphs for s in p.split(". "))
    assert main([str(tmp_path / "lm"), "--width", "32", "--layers", "1", "--steps", "30", "--lr", "3e-3",
                 "--batch", "8", "--T", "16"]) == 0
    record = json.loads((tmp_path / "lm" / "training.json").read_text())
    assert record["loss_after"]["train"] < record["loss_before"]["train"] - 0.5
    assert load_text_checkpoint(tmp_path / "lm").model.config.n_embd == 32
