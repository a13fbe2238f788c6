"""DAGER's encoder variant on BERT-shaped classifiers: labelled lines captured as [CLS] tokens [SEP], recovered exactly
through the CLI; what it cannot read (a 2-layer classifier, a delta) said, and bad classifier input refused with one
line and exit 2 (issue 68)."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("rouge_score")

from fedaudit.attacks.text import TEXT_ATTACKS  # noqa: E402
from fedaudit.attacks.text.dager import input_span  # noqa: E402
from fedaudit.client.text_capture import capture_text_update  # noqa: E402
from fedaudit.errors import NotApplicable  # noqa: E402
from fedaudit.io.text_checkpoint import load_text_checkpoint, save_text_checkpoint  # noqa: E402
from fedaudit.models.text_tiny import bert, train_wordpiece  # noqa: E402

from .helpers import TEXT_LINES  # noqa: E402

LABELLED = [f"{i % 2}\t{line}" for i, line in enumerate(TEXT_LINES)]


@pytest.fixture(scope="module")
def wordpiece():
    return train_wordpiece(2000)


@pytest.fixture(scope="module")
def encoder(wordpiece, tmp_path_factory):
    """A BERT classifier folder (width 64, 3 layers, random init)."""
    return save_text_checkpoint(tmp_path_factory.mktemp("bert") / "tiny", bert(wordpiece, width=64), wordpiece)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "labelled.txt"
    path.write_text("\n".join(LABELLED) + "\n")
    return path


def test_a_labelled_batch_of_four_is_recovered_exactly_from_an_encoder(cli, encoder, labelled, tmp_path):
    update, truth = tmp_path / "u.safetensors", tmp_path / "t.safetensors"
    cap = cli.json(cli("capture", encoder, labelled, "-o", update, "-b", 4, "--max-length", 10, "--truth-out", truth))
    assert cap["kind"] == "gradient" and all(line["tokens"] == 10 for line in cap["lines"])  # [CLS] 8 tokens [SEP]
    doc = cli.json(cli("reconstruct", "dager", encoder, update, "-o", tmp_path / "out", "--truth", truth,
                       "--fail-on", "high", expect=1))
    assert doc["certified"] == 4 and doc["metrics"]["exact_rate"] == 1.0 and doc["risk_band"] == "very_high"
    # every recovered line starts a client line (lower-cased by the tokenizer, cut to 8 tokens)
    assert all(any(line.lower().startswith(s) for line in TEXT_LINES) for s in doc["sequences"])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["model"]["kind"] == "encoder" and report["diagnostics"]["line_ends"] == [[9, 0]]
    # without the truth, the certificate is the verdict
    doc = cli.json(cli("reconstruct", "dager", encoder, update, "-o", tmp_path / "o2", "--fail-on", "high", expect=1))
    assert doc["risk_band_estimated"] == "very_high"
    info = cli.json(cli("inspect", encoder, update))
    assert info["checkpoint"]["kind"] == "encoder" and info["blocks_shared"] == [0, 1, 2]
    assert info["attacks"]["dager"]["applicable"] and info["attacks"]["tag"]["applicable"]


@pytest.mark.parametrize("shortlist", [8, 0])
def test_lines_of_different_lengths_and_shared_tokens_are_each_found(wordpiece, shortlist):
    """Lines end at different positions (each end a [SEP] that passes step 1), and two lines share tokens at the same
    positions: the search keeps every token open (the reference code's non-overlap filter would lose one). Found with
    the moves' shortlist (the default) and with every token scored on the whole line."""
    from fedaudit.io.text_checkpoint import TextCheckpoint

    ckpt = TextCheckpoint(bert(wordpiece, width=96, seed=1), wordpiece, "bert", "encoder", "test", "")
    lines = ["1\tReturn the value of the key.", "0\tReturn the value of the path.", "1\tOpen a file.",
             "0\tRaise an error when the path does not exist."]
    cap = capture_text_update(ckpt, lines, 4, max_length=16)
    truth = [cap.batch.ids[i, 1: n - 1].tolist() for i, n in enumerate(cap.batch.lengths)]
    result = TEXT_ATTACKS.get("dager")(shortlist=shortlist).run(ckpt, cap.tensors, 4)
    assert sorted(result.sequences) == sorted(truth) and all(result.exact)
    ends = sorted({n - 1 for n in cap.batch.lengths})
    assert [e for e, _ in result.diagnostics["line_ends"] if e in ends] == ends


def test_one_positions_block_one_input_equals_the_whole_lines(wordpiece):
    """The shortlist's cheap score: block 1's input at one position with the other positions' keys and values kept
    equals the whole line's forward at that position, for every token tried there."""
    from fedaudit.attacks.text.dager_encoder import EncoderFront

    front = EncoderFront.of(bert(wordpiece, width=64, heads=4, seed=2))
    gen = torch.Generator().manual_seed(0)
    line, tokens = torch.randint(5, 2000, (10,), generator=gen), torch.randint(5, 2000, (30,), generator=gen)
    with torch.no_grad():
        for position, kind in ((0, 0), (4, 1), (9, 0)):
            trial = line.repeat(30, 1)
            trial[:, position] = tokens
            whole = front.line_inputs(trial, kind)[:, position]
            assert torch.allclose(front.position_inputs(line, kind, position, tokens), whole, atol=1e-5)


def test_an_encoders_span_stacks_query_key_and_value(wordpiece):
    """Query, key and value share a block's input, and their gradients' rows are stacked: in a 2-layer classifier
    block 1 is the last layer, whose query serves only [CLS], so the query's rows alone hold fewer directions; and
    even the stack holds only combinations of each line's inputs there, so DAGER says it cannot apply."""
    from fedaudit.io.text_checkpoint import TextCheckpoint

    ckpt = TextCheckpoint(bert(wordpiece, width=64, layers=2), wordpiece, "bert", "encoder", "test", "")
    cap = capture_text_update(ckpt, LABELLED[:2], 2, max_length=8)
    stacked = input_span(ckpt, cap.tensors, 1, None)
    query = input_span(ckpt, {k: v for k, v in cap.tensors.items() if ".query." in k}, 1, None)
    assert query.rank < stacked.rank  # the last layer's query reads [CLS] only
    reasons = TEXT_ATTACKS.get("dager").reasons(ckpt, cap.tensors)
    assert any("2 layer" in r for r in reasons)


def test_what_the_encoder_search_cannot_read_says_why(cli, wordpiece, encoder, labelled, tmp_path):
    two = save_text_checkpoint(tmp_path / "two", bert(wordpiece, width=64, layers=2), wordpiece)
    cli("capture", two, labelled, "-o", tmp_path / "g.safetensors", "-b", 4, "--max-length", 10)
    r = cli("reconstruct", "dager", two, tmp_path / "g.safetensors", "-o", tmp_path / "o", expect=2)
    assert r.stderr.count("\n") == 1 and "not applicable" in r.stderr and "layer" in r.stderr
    cli("capture", encoder, labelled, "-o", tmp_path / "d.safetensors", "-b", 2, "-k", 2, "--lr", 0.01,
        "--max-length", 10)
    r = cli("reconstruct", "dager", encoder, tmp_path / "d.safetensors", "-o", tmp_path / "o", expect=2)
    assert r.stderr.count("\n") == 1 and "labels" in r.stderr
    # TAG counts a classifier's labels from its bias gradient: an update without it cannot be matched
    from fedaudit.io.update import load_update, save_update

    cli("capture", encoder, labelled, "-o", tmp_path / "g.safetensors", "-b", 4, "--max-length", 10, "--force")
    upd = load_update(tmp_path / "g.safetensors")
    save_update(tmp_path / "nobias.safetensors", {k: v for k, v in upd.tensors.items() if k != "classifier.bias"},
                upd.meta)
    r = cli("reconstruct", "tag", encoder, tmp_path / "nobias.safetensors", "-o", tmp_path / "o", expect=2)
    assert r.stderr.count("\n") == 1 and "classifier.bias" in r.stderr


@pytest.mark.parametrize("text, says", [("Return the value.\n", "LABEL<TAB>TEXT"), ("7\tReturn the value.\n", "label 7"),
                                        ("x\tReturn the value.\n", "LABEL<TAB>TEXT")])
def test_a_classifiers_lines_without_a_valid_label_are_refused_with_one_line(cli, encoder, tmp_path, text, says):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    r = cli("capture", encoder, path, "-o", tmp_path / "u.safetensors", "-b", 1, expect=2)
    assert r.stderr.count("\n") == 1 and says in r.stderr and not (tmp_path / "u.safetensors").exists()


def test_an_encoder_tokenizer_without_cls_and_sep_is_refused(cli, wordpiece, tmp_path):
    from fedaudit.models.text_tiny import train_tokenizer

    bpe = train_tokenizer(500)
    folder = save_text_checkpoint(tmp_path / "m", bert(wordpiece, width=32), bpe)
    r = cli("inspect", folder, tmp_path / "none.safetensors", expect=2)
    assert r.stderr.count("\n") == 1 and "[CLS]" in r.stderr and "lacks" in r.stderr


def test_an_encoder_checkpoint_round_trips_and_its_truth_drops_the_framing(wordpiece, encoder, labelled, tmp_path):
    from fedaudit.io.text_truth import load_text_truth
    from fedaudit.jobs.text_capture import TextCaptureJob

    ckpt = load_text_checkpoint(encoder)
    assert ckpt.kind == "encoder" and ckpt.start_id == wordpiece.token_to_id("[CLS]") and ckpt.pad_id == 0
    TextCaptureJob(encoder, labelled, 4, max_length=10).run_to(tmp_path / "u.safetensors", tmp_path / "t.safetensors")
    truth = load_text_truth(tmp_path / "t.safetensors")
    assert truth.lead == 1 and truth.labels.tolist() == [0, 1, 0, 1]
    assert all(ckpt.start_id not in s and ckpt.eos_id not in s and len(s) == 8 for s in truth.sequences())
    assert torch.equal(truth.ids[:, 0], torch.full((4,), ckpt.start_id))


@pytest.mark.parametrize("r, fresh, recovered", [(8, False, True), (4, False, False), (16, True, False)])
def test_an_encoders_lora_update_is_read_through_its_stacked_adapters(cli, wordpiece, encoder, tmp_path, r, fresh,
                                                                      recovered):
    """Adapters on query, key and value each show a rank-r slice of the inputs' span; stacked they show up to 3r
    directions, so two lines of 10 tokens (20 visible) are recovered at r = 8 and not at r = 4. A fresh adapter's
    B-path reads one module through its A: rank r = 16 < 20, nothing certified; the verdict says so."""
    from fedaudit.io.text_adapter import save_text_adapter
    from fedaudit.models.text_tiny import add_lora

    ckpt = load_text_checkpoint(encoder)
    config = add_lora(ckpt, r=r, fresh=fresh)
    folder = save_text_adapter(tmp_path / "adapter", ckpt, {**config, "base_model_name_or_path": str(encoder)})
    (tmp_path / "two.txt").write_text("\n".join(LABELLED[:2]) + "\n")
    cli("capture", folder, tmp_path / "two.txt", "-o", tmp_path / "u.safetensors", "-b", 2, "--max-length", 10,
        "--truth-out", tmp_path / "t.safetensors")
    doc = cli.json(cli("reconstruct", "dager", folder, tmp_path / "u.safetensors", "-o", tmp_path / "o", "--truth",
                       tmp_path / "t.safetensors", expect=None))
    assert (doc["certified"] == 2 and doc["metrics"]["exact_rate"] == 1.0) is recovered
    reveals = " ".join(doc["reveals"])
    assert "LoRA-only update" in reveals
    assert (f"r = {r} on each" in reveals) is (not fresh)
    assert ("reaches the bound" in reveals) is (not recovered)


def test_tag_reads_a_classifiers_line_with_counted_labels_and_certifies_it(wordpiece):
    """TAG on a BERT classifier: [CLS]/[SEP] pinned, the label counted from the classifier's bias gradient; one line
    of 8 tokens is read exactly in 200 steps (120 sufficed here) and the recovered line reproduces the update (certified). Two labelled
    lines: both labels counted right."""
    from fedaudit.io.text_checkpoint import TextCheckpoint
    from fedaudit.labels.text_classes import classifier_classes

    ckpt = TextCheckpoint(bert(wordpiece, width=64), wordpiece, "bert", "encoder", "test", "")
    cap = capture_text_update(ckpt, LABELLED[:1], 1, max_length=10)
    classes, _ = classifier_classes(ckpt, cap.tensors, 1)
    assert classes.tolist() == [0]
    torch.manual_seed(0)
    result = TEXT_ATTACKS.get("tag")(steps=200).run(ckpt, cap.tensors, 1, labels=classes)
    assert result.sequences == [cap.batch.ids[0, 1:-1].tolist()] and result.exact == [True]
    assert result.diagnostics["length"] == 8 and "[0]" in result.diagnostics["labels"]
    cap = capture_text_update(ckpt, LABELLED[:4], 4, max_length=10)
    classes, raw = classifier_classes(ckpt, cap.tensors, 4)
    assert classes.tolist() == [0, 0, 1, 1] and all(abs(r - 2) < 0.5 for r in raw)
    with pytest.raises(NotApplicable, match="labels"):  # the attack does not count them itself
        TEXT_ATTACKS.get("tag")(steps=1).run(ckpt, cap.tensors, 4)


def test_tag_through_the_cli_counts_a_classifiers_label_itself(cli, encoder, tmp_path):
    """The job counts the classifier's labels from the update (the attack sees only what it is given) and TAG's
    recovered line reproduces the update: certified, the estimated band very high without the truth."""
    (tmp_path / "one.txt").write_text(LABELLED[1] + "\n")
    cli("capture", encoder, tmp_path / "one.txt", "-o", tmp_path / "u.safetensors", "-b", 1, "--max-length", 10)
    doc = cli.json(cli("reconstruct", "tag", encoder, tmp_path / "u.safetensors", "-o", tmp_path / "o", "--steps",
                       200, "--fail-on", "high", expect=None))
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert "[1]" in report["diagnostics"]["labels"]  # line 2 is labelled 1
    assert doc["certified"] == 1 and doc["risk_band_estimated"] == "very_high"
    assert TEXT_LINES[1].lower().startswith(doc["sequences"][0])
