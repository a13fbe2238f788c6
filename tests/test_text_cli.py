"""Language-model updates through the command line: capture, inspect, reconstruct dager, the text bands, and the
inputs refused with one line and exit 2 (issue 68)."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("rouge_score")

from fedaudit.io.files import write_safetensors  # noqa: E402
from fedaudit.io.text_checkpoint import save_text_checkpoint  # noqa: E402
from fedaudit.io.update import UpdateMeta  # noqa: E402
from fedaudit.metrics.text_risk import estimated_text_band, measured_text_band  # noqa: E402
from fedaudit.models.text_tiny import gpt2, train_tokenizer  # noqa: E402
from fedaudit.report.text_html import marked_pair  # noqa: E402

from .helpers import TEXT_LINES as LINES  # noqa: E402
from .helpers import text_adapter as adapter  # noqa: E402


@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "lines.txt"
    path.write_text("\n".join(LINES) + "\n\n")  # a blank line is not a sequence
    return path


@pytest.fixture(scope="module")
def captured(tiny, lines, tmp_path_factory):
    from .helpers import Cli

    d = tmp_path_factory.mktemp("captured")
    out = Cli()("capture", tiny, lines, "-o", d / "update.safetensors", "-b", 4, "--max-length", 12,
                "--truth-out", d / "truth.safetensors")
    return d / "update.safetensors", d / "truth.safetensors", json.loads(out.stdout)


def test_a_batch_of_four_is_recovered_exactly_through_the_cli(cli, tiny, captured, tmp_path):
    update, truth, capture = captured
    assert capture["modality"] == "text" and capture["kind"] == "gradient" and capture["num_examples"] == 4
    r = cli("reconstruct", "dager", tiny, update, "-o", tmp_path / "out", "--truth", truth, "--fail-on", "high", expect=1)
    doc = cli.json(r)
    assert doc["certified"] == 4 and doc["metrics"]["exact_rate"] == 1.0 and doc["metrics"]["rouge2"] == pytest.approx(1.0)
    assert doc["risk_band"] == "very_high" and doc["fail_on"]["source"] == "measured"
    # each recovered line is the start of a client line (cut to 11 tokens; the appended end token is invisible)
    assert sorted(doc["sequences"]) == sorted(s for s in doc["sequences"] if any(line.startswith(s) for line in LINES))
    assert len(set(doc["sequences"])) == 4
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["modality"] == "text" and report["measured"]["exact"] == 4
    html = (tmp_path / "out" / "report.html").read_text()
    assert "side by side" in html and "Federated learning keeps" in html
    assert (tmp_path / "out" / "recovered.txt").read_text().count("\n") == 4


def test_without_the_truth_the_certificate_is_the_verdict(cli, tiny, captured, tmp_path):
    update, _, _ = captured
    doc = cli.json(cli("reconstruct", "dager", tiny, update, "-o", tmp_path / "out", "--fail-on", "high", expect=1))
    assert doc["risk_band"] is None and doc["metrics"] is None
    assert doc["risk_band_estimated"] == "very_high" and doc["risk_band_estimated_range"] == ["very_high", "very_high"]
    assert doc["fail_on"]["source"] == "estimated"
    assert not any("do not explain" in line for line in doc["reveals"])
    # a step-1 threshold too tight for the lines' later tokens: lines come back short, and the verdict says so
    tight = cli.json(cli("reconstruct", "dager", tiny, update, "-o", tmp_path / "tight", "--tau1", 1e-9, expect=None))
    assert any("do not explain" in line and "not all of it" in line for line in tight["reveals"])


def test_a_saturated_update_is_no_evidence_of_safety(cli, tokenizer, lines, tmp_path):
    """Wider batch than model: nothing can be certified, and the range is the whole scale (the upper end gates)."""
    narrow = save_text_checkpoint(tmp_path / "narrow", gpt2(tokenizer, width=16), tokenizer)
    cli("capture", narrow, lines, "-o", tmp_path / "u.safetensors", "-b", 4, "--max-length", 12)
    doc = cli.json(cli("reconstruct", "dager", narrow, tmp_path / "u.safetensors", "-o", tmp_path / "o", "--fail-on",
                       "high", expect=1))
    assert doc["certified"] == 0 and doc["risk_band_estimated_range"] == ["low", "very_high"]
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["diagnostics"]["saturated"] and "saturated" in report["verdict"]["why"]
    cli("reconstruct", "dager", narrow, tmp_path / "u.safetensors", "-o", tmp_path / "o", "--force", "--fail-on", "high",
        "--gate", "lower", expect=0)


def test_the_measured_text_band_and_its_range():
    whole = measured_text_band([1.0] * 4, [1.0] * 4)
    assert whole.band == "very_high" and whole.range == ["very_high", "very_high"]
    one = measured_text_band([1.0, 0.2, 0.1, 0.0], [1.0, 0.0, 0.0, 0.0])  # one sentence verbatim: at least high
    assert one.band == "high" and one.range[1] == "very_high"
    none = measured_text_band([0.1, 0.2, 0.1, 0.0], [0.0] * 4)
    assert none.band == "low" and none.range == ["low", "high"]  # 0 of 4 exact does not rule out 1 in 4
    assert estimated_text_band(2, 8).range == ["high", "very_high"]
    assert estimated_text_band(0, 8, "saturated").range == ["low", "very_high"]


def test_the_report_marks_the_words_that_differ():
    left, right = marked_pair("the quick brown fox", "the quick red fox")
    assert "<mark class='miss'>brown</mark>" in left and "<mark>red</mark>" in right and "the quick" in right
    assert "none matched" in marked_pair("a <b>", None)[1] and "&lt;b&gt;" in marked_pair("a <b>", None)[0]


def test_a_fedavg_text_delta_is_recovered_step_by_step(cli, tiny, lines, tmp_path):
    delta, truth = tmp_path / "d.safetensors", tmp_path / "t.safetensors"
    doc = cli.json(cli("capture", tiny, lines, "-o", delta, "-b", 2, "-k", 2, "--lr", 0.01, "--max-length", 12,
                       "--truth-out", truth))
    assert doc["kind"] == "delta" and doc["local_steps"] == 2 and [row["step"] for row in doc["lines"]] == [0, 0, 1, 1]
    info = cli.json(cli("inspect", tiny, delta))
    assert info["attacks"]["dager"]["applicable"] is True and info["embeddings_shared"] and info["blocks_shared"] == [0, 1]
    assert "all 2 local steps" in info["attacks"]["dager"]["limit"] and info["attacks"]["tag"]["applicable"] is False
    # each step searched at the weights replayed from the steps before it: all four lines, word for word
    out = cli.json(cli("reconstruct", "dager", tiny, delta, "-o", tmp_path / "o", "--truth", truth, "--fail-on", "high",
                       expect=1))
    assert out["certified"] == 4 and out["metrics"]["exact_rate"] == 1.0
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert sorted(report["diagnostics"]["local_step"]) == [0, 0, 1, 1] and report["diagnostics"]["replay_residual"] < 1e-3
    assert any("FedAvg delta of 2 local SGD steps" in line and "reproduces the delta" in line for line in out["reveals"])
    # without the truth the round's four lines, all certified, give the very-high band
    est = cli.json(cli("reconstruct", "dager", tiny, delta, "-o", tmp_path / "e", "--fail-on", "high", expect=1))
    assert est["risk_band_estimated"] == "very_high"
    # the reference code's reading, every step at the global weights: the second step's lines drift out of the span
    ref = cli.json(cli("reconstruct", "dager", tiny, delta, "-o", tmp_path / "g", "--steps-at", "global", "--truth", truth))
    assert ref["metrics"]["exact_rate"] < 1.0 and ref["certified"] == 0


def test_a_cycling_fedavg_round_is_recovered_with_widened_checks(cli, tiny, lines, tmp_path):
    # three steps over four lines (B = 2): the first batch is used twice, its two copies differ only by the drift, and
    # the first search's 5e-3 loses them; the replay does not reproduce, so the search widens once and is certified
    delta, truth = tmp_path / "d.safetensors", tmp_path / "t.safetensors"
    cli("capture", tiny, lines, "-o", delta, "-b", 2, "-k", 3, "--lr", 0.01, "--max-length", 8, "--truth-out", truth)
    out = cli.json(cli("reconstruct", "dager", tiny, delta, "-o", tmp_path / "o", "--truth", truth))
    assert out["certified"] == 4 and out["metrics"]["exact_rate"] == 1.0
    diag = json.loads((tmp_path / "o" / "report.json").read_text())["diagnostics"]
    assert diag["widened"] is True and sorted(diag["local_step"]) == [0, 0, 1, 1] and diag["per_step"] == [2, 2]


def test_a_heavy_ball_round_with_weight_decay_is_recovered(cli, tiny, lines, tmp_path):
    # weight decay adds a multiple of the whole weight matrix to the change (full rank: the span would be saturated);
    # the recursion on the global weights alone gives that multiple exactly, and the replay steps with the momentum
    delta, truth = tmp_path / "d.safetensors", tmp_path / "t.safetensors"
    cli("capture", tiny, lines, "-o", delta, "-b", 2, "-k", 2, "--lr", 0.01, "--momentum", 0.9, "--weight-decay", 0.1,
        "--max-length", 12, "--truth-out", truth)
    out = cli.json(cli("reconstruct", "dager", tiny, delta, "-o", tmp_path / "o", "--truth", truth))
    assert out["certified"] == 4 and out["metrics"]["exact_rate"] == 1.0
    r = cli("capture", tiny, lines, "-o", tmp_path / "g.safetensors", "-b", 4, "--momentum", 0.9, expect=2)
    assert "--momentum with -k 1" in r.stderr


def test_a_delta_drowned_in_round_off_certifies_nothing_and_says_why(cli, tiny, lines, tmp_path):
    # at lr 1e-4 the tiny model's change stands only ~800x above its float32 round-off: the checks lose lines, a line
    # cut short would pass them, and the replay (not reproduced) certifies none: the range reaches very high
    delta, truth = tmp_path / "d.safetensors", tmp_path / "t.safetensors"
    cli("capture", tiny, lines, "-o", delta, "-b", 2, "-k", 2, "--lr", 1e-4, "--max-length", 12, "--truth-out", truth)
    out = cli.json(cli("reconstruct", "dager", tiny, delta, "-o", tmp_path / "o", "--fail-on", "high", expect=1))
    assert out["certified"] == 0 and out["risk_band_estimated_range"][1] == "very_high"
    assert any("round-off" in line and "none is certified" in line for line in out["reveals"])


def test_a_tokenizer_the_embedding_cannot_hold_is_refused(cli, tiny, captured, tmp_path):
    import shutil

    bad = tmp_path / "badtok"
    shutil.copytree(tiny, bad)
    (bad / "tokenizer.json").write_text(train_tokenizer(3000).to_str())
    r = cli("inspect", bad, captured[0], expect=2)
    assert r.stderr.count("\n") == 1 and "3000 tokens" in r.stderr and "2000 rows" in r.stderr


def test_an_update_of_another_base_model_is_refused(cli, tokenizer, captured, tmp_path):
    other = save_text_checkpoint(tmp_path / "other", gpt2(tokenizer, width=64, seed=1), tokenizer)
    r = cli("reconstruct", "dager", other, captured[0], "-o", tmp_path / "o", expect=2)
    assert r.stderr.count("\n") == 1 and "another base model" in r.stderr and not (tmp_path / "o").exists()
    wider = save_text_checkpoint(tmp_path / "wider", gpt2(tokenizer, width=32), tokenizer)
    r = cli("inspect", wider, captured[0], "--ignore-base-mismatch", expect=2)
    assert "has shape" in r.stderr and "another model" in r.stderr


def test_an_adapter_without_its_base_says_which_base_it_names(cli, captured, tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8,
                                                             "base_model_name_or_path": "openai-community/gpt2"}))
    r = cli("reconstruct", "dager", adapter, captured[0], "-o", tmp_path / "o", expect=2)
    assert r.stderr.count("\n") == 1 and "'openai-community/gpt2'" in r.stderr and "without its base" in r.stderr


def test_lora_tensors_against_a_whole_model_and_image_commands_are_refused_with_one_line(cli, tiny, tmp_path):
    upd = tmp_path / "lora.safetensors"
    write_safetensors(upd, {"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight": torch.ones(8, 64)},
                      UpdateMeta(kind="gradient", reduction="mean", batch_size=4).to_metadata())
    r = cli("inspect", tiny, upd, expect=2)
    assert r.stderr.count("\n") == 1 and "LoRA adapter tensors" in r.stderr and "adapter folder" in r.stderr
    r = cli("labels", "idlg", tiny, upd, expect=2)
    assert "language-model folder" in r.stderr


TWO_LINES = "Gradients can leak text.\nA reviewer audits it.\n"


def test_an_adapter_config_never_makes_peft_import_a_module(cli, tiny, tmp_path, monkeypatch):
    """Issue 88: a megatron_config made peft import the module megatron_core names, found beside the adapter when run
    from its folder. megatron_core is never handed to peft (PEFT writes "megatron.core" there by default) and a
    megatron_config is refused before peft is imported."""
    folder = adapter(tiny, tmp_path / "adapter", 4, False)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "evil_mod.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').write('x')\n")
    monkeypatch.chdir(folder)
    (tmp_path / "one.txt").write_text(TWO_LINES)
    (folder / "adapter_config.json").write_text(json.dumps({**config, "megatron_core": "evil_mod"}))
    cli("capture", folder, tmp_path / "one.txt", "--base", tiny, "-o", tmp_path / "u.safetensors", "-b", 2)
    assert not (tmp_path / "imported").exists()
    (folder / "adapter_config.json").write_text(json.dumps({**config, "megatron_core": "evil_mod",
                                                            "megatron_config": {"tensor_model_parallel_size": 1}}))
    r = cli("capture", folder, tmp_path / "one.txt", "--base", tiny, "-o", tmp_path / "v.safetensors", "-b", 2, expect=2)
    assert r.stderr.count("\n") == 1 and "megatron_config" in r.stderr and not (tmp_path / "imported").exists()


TWO = ["Gradients can leak text.", "A reviewer audits it."]  # 12 visible tokens


@pytest.mark.parametrize("fresh", [False, True], ids=["fine-tuned", "fresh"])
def test_a_lora_only_update_is_recovered_exactly_below_the_adapter_rank(cli, tiny, tmp_path, fresh):
    """Fine-tuned adapter: grad A's rows span the inputs; fresh one (B = 0, grad A = 0): grad B shows them through A."""
    folder = adapter(tiny, tmp_path / "adapter", 32, fresh)
    (tmp_path / "two.txt").write_text("\n".join(TWO))
    cap = cli.json(cli("capture", folder, tmp_path / "two.txt", "--base", tiny, "-o", tmp_path / "u.safetensors",
                       "-b", 2, "--truth-out", tmp_path / "t.safetensors"))
    assert cap["tensors"] == 4  # lora_A and lora_B of blocks 0 and 1: nothing else is uploaded
    doc = cli.json(cli("reconstruct", "dager", folder, tmp_path / "u.safetensors", "--base", tiny, "-o", tmp_path / "o",
                       "-t", tmp_path / "t.safetensors"))
    assert sorted(doc["sequences"]) == sorted(TWO) and doc["metrics"]["exact_rate"] == 1.0
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["diagnostics"]["span_source"] == ["lora_B" if fresh else "lora_A"] * 2
    assert doc["reveals"][0].startswith("LoRA-only update: rank-32 adapters") and "embeddings" in doc["reveals"][0]
    assert "fewer than 32 visible tokens" in doc["reveals"][1] and "word for word" in doc["reveals"][-1]


def test_a_lora_update_past_the_adapter_rank_says_what_it_does_not_reveal(cli, tiny, tmp_path, monkeypatch):
    """Rank 8, twelve visible tokens: the adapters show a slice that holds none of them. The base is found from the
    adapter's base_model_name_or_path (a folder here), without --base."""
    folder = adapter(tiny, tmp_path / "adapter", 8, base_named=str(tiny))
    (tmp_path / "two.txt").write_text("\n".join(TWO))
    cli("capture", folder, tmp_path / "two.txt", "-o", tmp_path / "u.safetensors", "-b", 2)
    doc = cli.json(cli("reconstruct", "dager", folder, tmp_path / "u.safetensors", "-o", tmp_path / "o",
                       "--fail-on", "high", expect=1))
    assert doc["certified"] == 0 and doc["risk_band_estimated_range"] == ["low", "very_high"]
    assert "rank 8 of 8" in doc["reveals"][2] and "no evidence of safety" in doc["reveals"][2]
    info = cli.json(cli("inspect", folder, tmp_path / "u.safetensors"))
    assert info["embeddings_shared"] is False and info["checkpoint"]["adapter"]["r"] == 8
    assert "r = 8" in info["attacks"]["dager"]["limit"]
    # the same update against the adapter's base alone: one line saying which checkpoint to give
    r = cli("inspect", tiny, tmp_path / "u.safetensors", expect=2)
    assert "adapter folder" in r.stderr


def test_the_shipped_text_sample_leaks_every_line(cli, tmp_path):
    from .helpers import SAMPLES

    folder = SAMPLES / "gpt2_tiny_b4"
    doc = cli.json(cli("reconstruct", "dager", folder / "checkpoint", folder / "update.safetensors", "-o", tmp_path / "o",
                       "--truth", folder / "truth.safetensors"))
    assert doc["metrics"]["exact_rate"] == 1.0 and doc["risk_band"] == "very_high"
    lines = (folder / "lines.txt").read_text().splitlines()
    assert all(any(line.startswith(s) for line in lines) for s in doc["sequences"]) and len(doc["sequences"]) == 4


@pytest.mark.slow
def test_the_text_sample_regenerates_byte_for_byte(tmp_path):
    import importlib.util

    from .helpers import SAMPLES, assert_regenerated

    spec = importlib.util.spec_from_file_location("make_text_sample", SAMPLES / "make_text_sample.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    try:
        assert mod.main(["--out", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    made, shipped = tmp_path / mod.NAME, SAMPLES / mod.NAME

    def config(folder):  # the writer's transformers version is stamped in: another version, the same model
        return {k: v for k, v in json.loads((folder / "checkpoint/config.json").read_text()).items()
                if k != "transformers_version"}

    assert config(made) == config(shipped)
    for rel in ("checkpoint/model.safetensors", "checkpoint/tokenizer.json", "lines.txt"):
        assert (made / rel).read_bytes() == (shipped / rel).read_bytes(), rel
    assert_regenerated(tmp_path / mod.NAME, SAMPLES / mod.NAME)


def test_an_update_recorded_in_train_mode_through_dropout_is_not_read_as_low(cli, tiny, tmp_path):
    """Issue 90: a step recorded in train mode (GPT-2's dropout 0.1) gave "0 sequences recovered" and a point of "low"
    ("a true token failed a check"); nothing detected or named dropout. Now inspect and the report name it, and
    nothing certified under a premise that may have failed is not "low"."""
    from fedaudit.client.text_capture import client_loss, tokenize_lines
    from fedaudit.io.files import write_safetensors
    from fedaudit.io.text_adapter import load_text_model

    ckpt = load_text_model(tiny)
    assert ckpt.model.config.resid_pdrop > 0
    batch = tokenize_lines(ckpt, TWO, 12)
    model = ckpt.model.train()  # what a training loop does by default: dropout on
    torch.manual_seed(0)
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(client_loss(model, batch), list(params.values()), allow_unused=True)
    tensors = {ckpt.update_key(n): g.contiguous() for n, g in zip(params, grads) if g is not None}
    upd = tmp_path / "train_mode.safetensors"
    write_safetensors(upd, tensors, UpdateMeta(kind="gradient", reduction="mean", batch_size=2).to_metadata())
    model.eval()
    out = cli.json(cli("reconstruct", "dager", tiny, upd, "-o", tmp_path / "o", "--fail-on", "high", "--gate", "point",
                       expect=1))
    assert out["certified"] == 0 and out["risk_band_estimated"] == "very_high"
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert any("dropout (p = 0.1)" in w for w in report["warnings"])
    assert "premise may not hold" in report["verdict"]["why"]
