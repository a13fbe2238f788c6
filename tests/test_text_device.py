"""Text attacks on the session's device: every tensor an attack makes is made on its model's device.

No CUDA here, so the discipline is checked on the CPU: an attack is run a second time with PyTorch's default device
set to ``meta`` (a device that holds shapes only). A tensor the attack makes without saying where lands on ``meta``
and fails the first operation that meets the model's CPU tensors; on a CUDA machine the same tensor would land on the
CPU and fail against the model's CUDA tensors. A run that passes gives the same lines as the plain run. What this
cannot see: a tensor placed on the host on purpose (a seeded draw, the counted labels) that then meets the model
without being moved; the CUDA rows (``-m cuda``) run the CLI on a GPU when one is lent and compare it with the CPU
(benchmarks/gpu_rows.sh, step ``tests``).
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("rouge_score")

from fedaudit.attacks.text import TEXT_ATTACKS  # noqa: E402
from fedaudit.io.text_checkpoint import save_text_checkpoint  # noqa: E402
from fedaudit.jobs.text_capture import TextCaptureJob  # noqa: E402
from fedaudit.labels.text_classes import classifier_classes  # noqa: E402
from fedaudit.models.text_tiny import bert, llama, train_wordpiece  # noqa: E402
from fedaudit.text_threat_model import load_text_threat_model  # noqa: E402

from .helpers import TEXT_LINES, plain_and_placed, same_tensors, text_adapter  # noqa: E402


def _threat_model(folder, tmp_path, lines, b=4, k=1, lr=None, base=None):
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n")
    update = tmp_path / "u.safetensors"
    TextCaptureJob(folder, tmp_path / "lines.txt", b, k, lr, max_length=10, base=base).run_to(update)
    return load_text_threat_model(folder, update, base=base)


def _both(tm, attack, **options):
    """The attack's result on the CPU, then again with every unplaced tensor sent to ``meta`` (module docstring); a
    classifier's labels are counted in each run, as the job counts them."""
    def run():
        torch.manual_seed(0)
        method = TEXT_ATTACKS.get(attack)(**options)
        labels = None
        if tm.checkpoint.kind == "encoder" and method.uses_labels:
            labels, _ = classifier_classes(tm.checkpoint, tm.gradient, tm.batch_size)
        return method.run(tm.checkpoint, tm.gradient, tm.batch_size, tm.meta.local_steps, tm.local, labels)

    plain, placed = plain_and_placed(run)
    assert placed.sequences == plain.sequences and placed.exact == plain.exact
    return plain


def test_dager_makes_every_tensor_on_its_models_device(tiny, tmp_path):
    result = _both(_threat_model(tiny, tmp_path, TEXT_LINES), "dager")
    assert sum(result.exact) == 4


def test_dager_on_a_delta_replays_the_round_on_its_models_device(tiny, tmp_path):
    result = _both(_threat_model(tiny, tmp_path, TEXT_LINES, b=2, k=2, lr=0.01), "dager")
    assert sum(result.exact) == 4 and result.diagnostics["replay_residual"] < 1e-3


def test_dager_on_llama_and_lora_makes_every_tensor_on_its_models_device(tokenizer, tiny, tmp_path):
    folder = save_text_checkpoint(tmp_path / "llama", llama(tokenizer, kv_heads=1), tokenizer)
    assert sum(_both(_threat_model(folder, tmp_path, TEXT_LINES), "dager").exact) == 4
    for fresh in (False, True):  # lora_A's span, and a fresh adapter's lora_B read through A
        adapter = text_adapter(tiny, tmp_path / f"adapter{fresh}", r=64, fresh=fresh)
        (tmp_path / str(fresh)).mkdir()
        assert _both(_threat_model(adapter, tmp_path / str(fresh), TEXT_LINES, base=tiny), "dager").sequences


def test_dager_on_an_encoder_makes_every_tensor_on_its_models_device(tmp_path):
    wordpiece = train_wordpiece(2000)
    folder = save_text_checkpoint(tmp_path / "bert", bert(wordpiece, width=64), wordpiece)
    tm = _threat_model(folder, tmp_path, [f"{i % 2}\t{line}" for i, line in enumerate(TEXT_LINES)])
    assert sum(_both(tm, "dager").exact) == 4
    assert _both(tm, "tag", steps=3).sequences  # the classifier's labels counted, the framing pinned


@pytest.mark.parametrize("attack,options", [("tag", {"steps": 3}),
                                            ("lamp", {"steps": 4, "swap-every": 2, "swap-burnin": 0, "swap-candidates": 3,
                                                      "init-candidates": 2, "init-permutations": 2})])
def test_tag_and_lamp_make_every_tensor_on_their_models_device(tiny, tmp_path, attack, options):
    assert len(_both(_threat_model(tiny, tmp_path, TEXT_LINES), attack, **options).sequences) == 4


@pytest.mark.parametrize("b,k,lr", [(4, 1, None), (2, 2, 0.01)])
def test_a_text_capture_makes_every_tensor_on_its_models_device(tiny, b, k, lr):
    from fedaudit.client.text_capture import capture_text_update
    from fedaudit.io.text_checkpoint import load_text_checkpoint

    ckpt = load_text_checkpoint(tiny)
    plain, placed = plain_and_placed(lambda: capture_text_update(ckpt, TEXT_LINES, b, k, lr, max_length=10))
    assert same_tensors(plain.tensors, placed.tensors)


def test_cuda_without_a_gpu_is_one_line_and_exit_2(cli, tiny, tmp_path):
    """``--device`` reaches the text commands; asking for CUDA where there is none is a usage error."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    (tmp_path / "lines.txt").write_text("\n".join(TEXT_LINES) + "\n")
    update = tmp_path / "u.safetensors"
    for args in (("capture", tiny, tmp_path / "lines.txt", "-o", update, "-b", 4, "--device", "cuda"),
                 ("reconstruct", "dager", tiny, tmp_path / "none.safetensors", "-o", tmp_path / "o", "--device", "cuda")):
        r = cli(*args, expect=2)
        assert r.stderr.count("\n") == 1 and "CUDA is not available" in r.stderr
    cli("capture", tiny, tmp_path / "lines.txt", "-o", update, "-b", 4, "--max-length", 10, "--device", "cpu")
    doc = cli.json(cli("reconstruct", "dager", tiny, update, "-o", tmp_path / "o", "--device", "cpu"))
    assert doc["certified"] == 4
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["environment"]["device"] == "cpu"


def _gpu_rows(cli, folder, lines, tmp_path, attack, *options):
    """The same capture attacked on the CPU and on CUDA: the lines, the certificates."""
    update, truth = tmp_path / "u.safetensors", tmp_path / "t.safetensors"
    cli("capture", folder, lines, "-o", update, "-b", 4, "--max-length", 10, "--truth-out", truth)
    docs = [cli.json(cli("reconstruct", attack, folder, update, "-o", tmp_path / device, "--truth", truth, "--device",
                         device, *options, expect=None)) for device in ("cpu", "cuda")]
    report = json.loads((tmp_path / "cuda" / "report.json").read_text())
    assert report["environment"]["device"].startswith("cuda")
    return docs


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_dager_on_cuda_reads_what_it_reads_on_the_cpu(cli, tiny, tokenizer, tmp_path):
    (tmp_path / "lines.txt").write_text("\n".join(TEXT_LINES) + "\n")
    cpu, gpu = _gpu_rows(cli, tiny, tmp_path / "lines.txt", tmp_path, "dager")
    assert gpu["certified"] == cpu["certified"] == 4 and sorted(gpu["sequences"]) == sorted(cpu["sequences"])
    wordpiece = train_wordpiece(2000)
    encoder = save_text_checkpoint(tmp_path / "bert", bert(wordpiece, width=64), wordpiece)
    (tmp_path / "labelled.txt").write_text("\n".join(f"{i % 2}\t{line}" for i, line in enumerate(TEXT_LINES)) + "\n")
    (tmp_path / "e").mkdir()
    cpu, gpu = _gpu_rows(cli, encoder, tmp_path / "labelled.txt", tmp_path / "e", "dager")
    assert gpu["certified"] == cpu["certified"] == 4 and sorted(gpu["sequences"]) == sorted(cpu["sequences"])
    # TAG on the classifier: its labels are counted on the host and meet the model's logits on the GPU
    (tmp_path / "t").mkdir()
    cpu, gpu = _gpu_rows(cli, encoder, tmp_path / "labelled.txt", tmp_path / "t", "tag", "--steps", 20)
    assert len(gpu["sequences"]) == 4


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tag_runs_on_cuda(cli, tiny, tmp_path):
    (tmp_path / "lines.txt").write_text("\n".join(TEXT_LINES) + "\n")
    cpu, gpu = _gpu_rows(cli, tiny, tmp_path / "lines.txt", tmp_path, "tag", "--steps", 100)
    assert len(gpu["sequences"]) == len(cpu["sequences"]) == 4
    report = json.loads((tmp_path / "cuda" / "report.json").read_text())
    assert report["diagnostics"]["steps"] == 100 and report["diagnostics"]["objective"] < float("inf")
