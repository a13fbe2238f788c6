"""DAGER on a LLaMA-shaped decoder (rotary positions, RMSNorm, grouped-query attention): the token set from one
position-free pass, lines grown from the beginning-of-sequence token the client prepends, recovered exactly through
the CLI; gradient matching with the start token pinned, given the length (issue 68)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("rouge_score")

from fedaudit.io.text_checkpoint import load_text_checkpoint, save_text_checkpoint  # noqa: E402
from fedaudit.models.text_tiny import llama  # noqa: E402

from .helpers import TEXT_LINES  # noqa: E402


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory):
    """A LLaMA folder: width 64, two layers, two query heads sharing one key/value head."""
    return save_text_checkpoint(tmp_path_factory.mktemp("llama") / "tiny", llama(tokenizer, kv_heads=1), tokenizer)


def test_a_llama_batch_of_four_is_recovered_exactly_through_the_cli(cli, folder, tmp_path):
    (tmp_path / "lines.txt").write_text("\n".join(TEXT_LINES) + "\n")
    update, truth = tmp_path / "u.safetensors", tmp_path / "t.safetensors"
    cli("capture", folder, tmp_path / "lines.txt", "-o", update, "-b", 4, "--max-length", 12, "--truth-out", truth)
    doc = cli.json(cli("reconstruct", "dager", folder, update, "-o", tmp_path / "o", "--truth", truth, "--fail-on",
                       "high", expect=1))
    assert doc["certified"] == 4 and doc["metrics"]["exact_rate"] == 1.0 and doc["risk_band"] == "very_high"
    assert all(any(line.startswith(s) for line in TEXT_LINES) for s in doc["sequences"])
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["diagnostics"]["position_free"] and report["model"]["model_type"] == "llama"
    ckpt = load_text_checkpoint(folder)
    assert ckpt.start_id == ckpt.model.config.bos_token_id  # each line begins with it; the truth leaves it out
    r = cli("reconstruct", "tag", folder, update, "-o", tmp_path / "o2", expect=2)
    assert r.stderr.count("\n") == 1 and "rotary" in r.stderr and "--length" in r.stderr
    info = cli.json(cli("inspect", folder, update))
    assert info["blocks_shared"] == [0, 1] and info["embeddings_shared"] and info["attacks"]["dager"]["applicable"]


def test_without_the_start_token_a_repeated_token_is_the_token_alone(tokenizer):
    """Why the client's BOS matters to DAGER on rotary models: with all earlier tokens equal, attention averages
    equal values whatever the positions, so block 1's input of [t, t] is that of [t] and the span cannot tell a
    token from its repetition; after another token (the BOS a client prepends) the two differ."""
    import torch

    from fedaudit.attacks.text.fronts import LlamaFront

    front = LlamaFront(llama(tokenizer))
    t, first = 500, 7
    with torch.no_grad():
        alone, twice = front.last_inputs(torch.tensor([[t]])), front.last_inputs(torch.tensor([[t, t]]))
        after = front.last_inputs(torch.tensor([[first, t]])), front.last_inputs(torch.tensor([[first, t, t]]))
    assert torch.allclose(alone, twice, atol=1e-6)
    assert not torch.allclose(after[0], after[1], atol=1e-3)


def test_tag_on_llama_pins_the_start_token_and_reads_the_lines_words(cli, folder, tmp_path):
    """TAG with --length (rotary positions leave no position embedding to read it from): the dummy lines begin with
    the pinned start token, and 300 steps read the B = 1 line's tokens, most out of order (measured: every token of
    the line, 1 of 10 in place; ROUGE-1 0.6, as the misplaced sub-word tokens join into other words): at random init
    the rotary model barely tells positions apart. Nothing is certified."""
    (tmp_path / "lines.txt").write_text(TEXT_LINES[0] + "\n")
    update, truth = tmp_path / "u.safetensors", tmp_path / "t.safetensors"
    cli("capture", folder, tmp_path / "lines.txt", "-o", update, "-b", 1, "--max-length", 12, "--truth-out", truth)
    doc = cli.json(cli("reconstruct", "tag", folder, update, "-o", tmp_path / "o", "--truth", truth, "--steps", 300,
                       "--length", 12))
    assert doc["metrics"]["rouge1"] >= 0.4 and doc["certified"] == 0
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["diagnostics"]["length"] == 11 and report["diagnostics"]["length_from"] == "--length"
