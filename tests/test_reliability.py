"""Issue-20 findings, each with its test: SIGTERM like Ctrl-C, Ctrl-C during start-up, -o FILE needs --force,
integer updates and impossible checkpoint sizes refused before anything is allocated."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from fedaudit.io.files import read_safetensors, write_safetensors

from .helpers import ROOT, assert_one_error_line, sample, start_long_reconstruct


@pytest.mark.slow
def test_sigterm_is_handled_like_ctrl_c(tmp_path):
    proc, out, _ = start_long_reconstruct(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert json.loads((out / "report.json").read_text())["status"] == "interrupted"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


@pytest.mark.slow
def test_an_early_interrupt_is_one_line_not_a_traceback():
    proc = subprocess.Popen([sys.executable, "-m", "fedaudit", "--help"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(1.0)  # python is up (~0.05 s), torch is still importing (2-5 s)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the imports finished before the signal arrived")
    if proc.returncode == -signal.SIGINT and not stderr:  # a loaded machine: Python had not installed its handler
        pytest.skip("the signal arrived before the interpreter had started")
    # 130, or killed by SIGINT after the line (-2, which a shell also reports as 130) when the interrupt lands
    # where Python re-raises it at exit
    assert proc.returncode in (130, -signal.SIGINT) and "Traceback" not in stderr, stderr
    assert stderr.strip() == "fedaudit: error: interrupted"


def test_an_interrupt_while_the_command_line_is_parsed_says_so(monkeypatch, capsys):
    """Found at load average 10 (docs/results/loaded_suite.md): a Ctrl-C after the imports but outside a command's
    body (the help printing, the options being parsed) ended in a silent exit 130 (Typer's conversion) or a
    traceback. Here the interrupt lands while the command line is parsed, deterministically."""
    import typer

    from fedaudit.cli import app as app_module
    from fedaudit.cli import entry

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(type(typer.main.get_command(app_module.app)), "make_context", interrupted)
    monkeypatch.setattr(entry.signal, "signal", lambda *args: None)  # the test process keeps its own handlers
    monkeypatch.setattr(sys, "argv", ["fedaudit", "inspect", "--help"])
    with pytest.raises(SystemExit) as done:
        entry.main()
    assert done.value.code == 130 and capsys.readouterr().err == "fedaudit: error: interrupted\n"


def test_output_files_are_not_replaced_without_force(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b4")
    target = tmp_path / "result.json"
    target.write_text("keep me")
    for command in (["labels", "idlg"], ["inspect"]):
        res = cli(*command, ckpt, upd, "-o", target, "-q", expect=2)
        assert_one_error_line(res.stderr, "already exists", "--force")
        assert target.read_text() == "keep me"
    cli("inspect", ckpt, upd, "-o", target, "-q", "--force")
    assert json.loads(target.read_text())["kind"] == "gradient"


def test_an_integer_update_is_refused(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b4")
    tensors, meta = read_safetensors(upd, "update")
    bad = tmp_path / "int.safetensors"
    write_safetensors(bad, {k: (v * 1000).to(torch_int()) if v.is_floating_point() else v for k, v in tensors.items()}, meta)
    res = cli("labels", "llg", ckpt, bad, expect=2)
    assert_one_error_line(res.stderr, "int32", "floating point")


def torch_int():
    import torch

    return torch.int32


@pytest.mark.parametrize("field,value,message", [
    ("input_shape", "[3, 100000, 100000]", "not plausible"),
    ("input_shape", "[3, 0, 32]", "input_shape"),
    ("num_classes", "1000000000", "above 1,000,000"),
])
def test_impossible_checkpoint_sizes_are_refused_before_allocation(cli, tmp_path, field, value, message):
    ckpt, upd, _ = sample("lenet_b4")
    tensors, meta = read_safetensors(ckpt, "checkpoint")
    bad = tmp_path / "ckpt.safetensors"
    write_safetensors(bad, tensors, {**meta, f"fedaudit.{field}": value})
    res = cli("inspect", bad, upd, expect=2)
    assert_one_error_line(res.stderr, message)


def test_a_model_larger_than_memory_is_refused_with_its_size(monkeypatch, cli, tmp_path):
    from fedaudit.io import checkpoint

    monkeypatch.setattr(checkpoint, "_memory_bytes", lambda: 1000)  # a machine with 1 kB of memory
    ckpt, upd, _ = sample("lenet_b4")
    res = cli("inspect", ckpt, upd, expect=2)
    assert_one_error_line(res.stderr, "GiB of parameters", "memory")


@pytest.mark.parametrize("name", ["lenet_b4", "lenet_fedavg_k3", "mlp_mnist_withheld", "resnet10_b4"])
def test_inspect_and_reconstruct_agree_on_which_attacks_apply(cli, name):
    from fedaudit.attacks import ATTACKS
    from fedaudit.jobs import ReconstructJob, Session

    from .helpers import load_sample

    ckpt, upd, _ = sample(name)
    info = json.loads(cli("inspect", ckpt, upd, "-q").stdout)
    tm, _ = load_sample(name)
    for attack, _cls in ATTACKS:
        says = info["attacks"][attack]["applicable"]
        assert says == (not ReconstructJob(Session(), tm, attack).why_not()), (attack, info["attacks"][attack])


def test_a_finished_run_removes_its_resume_checkpoint(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b1")
    cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "-n", "40", "--checkpoint-every", "10", "-q")
    assert (tmp_path / "out" / "report.json").is_file()
    assert not (tmp_path / "out.checkpoint.safetensors").exists()


@pytest.mark.parametrize("args,message", [
    (["reconstruct", "ig", "--tv", "-3"], "--tv must be >= 0"),
    (["reconstruct", "ig", "--lr", "nan"], "not a finite number"),
    (["reconstruct", "ig", "-n", "0"], "--iterations must be > 0"),
    (["defend", "dp", "--eps", "-1"], "--eps must be >= 0"),
])
def test_numeric_options_are_checked_before_any_work(cli, tmp_path, args, message):
    ckpt, upd, _ = sample("lenet_b1")
    res = cli(*args[:2], ckpt, upd, "-o", tmp_path / "out", *args[2:], expect=2)
    assert_one_error_line(res.stderr, message)
    assert not (tmp_path / "out").exists()


def test_unreliable_results_come_with_a_warning(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_fedavg_k3")
    out = json.loads(cli("labels", "llg", ckpt, upd, "-q").stdout)
    assert any("assumes one local step" in w and "K = 3" in w and "'labels auto'" in w for w in out["warnings"]), \
        out["warnings"]
    ckpt, upd, _ = sample("lenet_b4")
    out = json.loads(cli("labels", "ilrg", ckpt, upd, "-q").stdout)
    assert any("raw per-class estimates sum to" in w for w in out["warnings"]), out["warnings"]
    ckpt, upd, _ = sample("lenet_b1")
    res = cli("reconstruct", "fedleak", ckpt, upd, "-o", tmp_path / "f", "-n", "30", "--lr", "1e-4")
    assert "under 10% of fedleak's default" in res.stderr
    report = json.loads((tmp_path / "f" / "report.json").read_text())
    assert any("barely moved" in w for w in report["attack"]["warnings"])


def test_bare_fedaudit_prints_its_help_on_stderr_and_exits_2():
    from .helpers import run_module

    res = run_module()
    assert res.returncode == 2 and res.stdout == ""
    assert "Usage" in res.stderr and "reconstruct" in res.stderr


def test_out_of_memory_is_a_clear_runtime_failure(cli, tmp_path, monkeypatch):
    """A CUDA OOM, simulated on the CPU: exit 3 with the batch that failed and a hint, no report folder."""
    import torch

    from fedaudit.attacks.engine import GradientEngine

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(GradientEngine, "gradient", oom)
    ckpt, upd, _ = sample("lenet_b4")
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "-n", "5", "-q", expect=3)
    assert_one_error_line(res.stderr, "out of memory", "4 images (4x3x32x32)", "--batch-size")
    assert not (tmp_path / "out").exists()


def test_a_corrupt_resume_checkpoint_is_bad_input_naming_the_file(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b1")
    bad = tmp_path / "resume.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "-n", "5", "--resume", bad, "-q", expect=2)
    assert_one_error_line(res.stderr, str(bad))


def test_a_huge_image_file_is_refused_before_decoding(cli, tmp_path):
    """A PNG whose header claims 10,000 x 8,000 pixels (80 MP): refused from its header, nothing decoded."""
    import struct
    import zlib

    from PIL import Image

    small = tmp_path / "small.png"
    Image.new("RGB", (1, 1)).save(small)
    data = bytearray(small.read_bytes())
    start = data.index(b"IHDR")
    data[start + 4:start + 12] = struct.pack(">II", 10_000, 8_000)
    data[start + 17:start + 21] = struct.pack(">I", zlib.crc32(bytes(data[start:start + 17])) & 0xFFFFFFFF)
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "bomb_3.png").write_bytes(bytes(data))
    ckpt, _, _ = sample("lenet_b1")
    res = cli("capture", ckpt, folder, "-o", tmp_path / "u.safetensors", "-b", "1", "--image-labels", "names", expect=2)
    assert_one_error_line(res.stderr, "10000 x 8000", "megapixels")
    assert not (tmp_path / "u.safetensors").exists()


def test_a_disk_that_fills_while_the_report_is_written_loses_nothing_finished(cli, tmp_path, monkeypatch):
    """ENOSPC on the report's third file: exit 2 with the reason, no half-written folder, no staging folder left,
    and the resume checkpoint (the best reconstruction so far) kept for a later --resume."""
    import errno

    from fedaudit.io import files
    from fedaudit.report import outdir

    real, calls = files.atomic_write_bytes, []

    def filling(path, data):
        calls.append(path)
        if len(calls) == 3:
            raise files.InputError(f"cannot write {str(path)!r}: {errno.errorcode[errno.ENOSPC]} (No space left on device)")
        return real(path, data)

    monkeypatch.setattr(outdir, "atomic_write_bytes", filling)
    ckpt, upd, _ = sample("lenet_b1")
    out = tmp_path / "out"
    res = cli("reconstruct", "ig", ckpt, upd, "-o", out, "-n", "20", "--checkpoint-every", "10", "-q", expect=2)
    assert_one_error_line(res.stderr, "No space left on device")
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".partial" in p.name]
    assert (tmp_path / "out.checkpoint.safetensors").is_file()


@pytest.mark.slow
def test_piped_stderr_has_no_blank_lines(tmp_path):
    from .helpers import run_module

    ckpt, upd, _ = sample("lenet_b1")
    res = run_module("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "-n", "5")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines and all(ln.strip() for ln in lines), res.stderr


def test_truth_flags_read_the_same_everywhere(cli, tmp_path):
    ckpt, upd, truth = sample("lenet_b4")
    a = json.loads(cli("defend", "soteria", ckpt, upd, "-o", tmp_path / "a.safetensors", "--batch", truth, "-q").stdout)
    b = json.loads(cli("defend", "soteria", ckpt, upd, "-o", tmp_path / "b.safetensors", "--truth", truth, "-q").stdout)
    assert a["relative_gradient_error"] == b["relative_gradient_error"]
    ta, _ = read_safetensors(tmp_path / "a.safetensors", "a")
    tb, _ = read_safetensors(tmp_path / "b.safetensors", "b")
    assert ta.keys() == tb.keys() and all((ta[k] == tb[k]).all() for k in ta)


def test_an_output_folder_that_turns_read_only_at_the_end_loses_nothing(cli, tmp_path, monkeypatch):
    """The final rename is refused (the folder became read-only mid-run): exit 2 with the reason, no staging
    folder left, an earlier report at the same place kept, and the resume checkpoint kept."""
    import os

    from fedaudit.report import outdir

    ckpt, upd, _ = sample("lenet_b1")
    out = tmp_path / "out"
    cli("reconstruct", "ig", ckpt, upd, "-o", out, "-n", "5", "-q")
    before = (out / "report.json").read_text()
    real = os.rename

    def refuse(src, dst):
        if ".partial" in str(src):
            raise PermissionError(13, "Permission denied")
        return real(src, dst)

    monkeypatch.setattr(outdir.os, "rename", refuse)
    res = cli("reconstruct", "ig", ckpt, upd, "-o", out, "-n", "20", "--checkpoint-every", "10", "--force", "-q", expect=2)
    assert_one_error_line(res.stderr, "Permission denied")
    assert (out / "report.json").read_text() == before
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name or ".old-" in p.name]
    assert (tmp_path / "out.checkpoint.safetensors").is_file()


def test_an_implausible_recorded_batch_size_is_refused_at_once(cli, tmp_path):
    """Found by the fuzzer: fedaudit.batch_size = 1e9 made `labels auto` run for an hour."""
    ckpt, upd, _ = sample("convnet_b8_repeated")
    tensors, meta = read_safetensors(upd, "update")
    bad = tmp_path / "u.safetensors"
    write_safetensors(bad, tensors, {**meta, "fedaudit.batch_size": "1000000000"})
    res = cli("labels", "auto", ckpt, bad, "--dummy", expect=2)
    assert_one_error_line(res.stderr, "fedaudit.batch_size", "not a plausible value")
    res = cli("labels", "llg", ckpt, upd, "-b", "100000", expect=2)
    assert_one_error_line(res.stderr, "--batch-size must be at most 65,536")


def test_a_required_metadata_value_of_null_is_bad_input(cli, tmp_path):
    """Found by the fuzzer: fedaudit.input_shape = null ended as an internal error (exit 3)."""
    ckpt, upd, _ = sample("lenet_b4")
    tensors, meta = read_safetensors(ckpt, "checkpoint")
    bad = tmp_path / "ckpt.safetensors"
    write_safetensors(bad, tensors, {**meta, "fedaudit.input_shape": "null"})
    res = cli("inspect", bad, upd, expect=2)
    assert_one_error_line(res.stderr, "fedaudit.input_shape", "is null")


@pytest.mark.parametrize("labels", [5, None, [True, True, True, True]])
def test_a_labels_file_that_is_not_a_list_of_integers_is_bad_input(cli, tmp_path, labels):
    """Found by the fuzzer: {"labels": 5}, null and booleans ended as internal errors (exit 3)."""
    ckpt, upd, _ = sample("lenet_b4")
    f = tmp_path / "labels.json"
    f.write_text(json.dumps({"labels": labels}))
    res = cli("reconstruct", "ig", ckpt, upd, "--labels-file", f, "-n", "2", "-o", tmp_path / "r", "-q", expect=2)
    assert_one_error_line(res.stderr, "labels must be integers")


def test_a_truth_file_with_an_empty_step_tensor_is_bad_input(cli, tmp_path):
    """Found by the fuzzer: a zero-size 'step' tensor in the truth ended as an internal error."""
    ckpt, upd, truth = sample("lenet_b4")
    tensors, meta = read_safetensors(truth, "truth")
    bad = tmp_path / "t.safetensors"
    write_safetensors(bad, {**tensors, "step": tensors["step"][:0]}, meta)
    res = cli("labels", "llg", ckpt, upd, "--truth", bad, expect=2)
    assert_one_error_line(res.stderr, "'step' must be a vector of 4")


def test_npz_arrays_are_checked_before_numpy_allocates_them(cli, tmp_path):
    """Found by the fuzzer: an .npy header claiming 10^12 elements ended as 'out of memory' (exit 3); integer or
    NaN arrays for float parameters were imported."""
    import numpy as np

    from benchmarks.fuzz_inputs import _huge_npy_header, _savez
    from fedaudit.io.checkpoint import load_checkpoint

    ckpt, upd, _ = sample("lenet_b4")
    tensors, _ = read_safetensors(upd, "update")
    arrays = {f"arr_{i}": tensors[n].numpy() for i, (n, _) in enumerate(load_checkpoint(ckpt).model.named_parameters())}
    cases = {"huge.npz": (_huge_npy_header(_savez(arrays)), "claims shape [1000000, 1000000]"),
             "int.npz": (_savez({**arrays, "arr_1": arrays["arr_1"].astype(np.int32)}), "is int32, but that tensor is floating"),
             "nan.npz": (_savez({**arrays, "arr_1": arrays["arr_1"] * np.nan}), "holds NaN or Inf")}
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        res = cli("import", "flower-npz", tmp_path / name, "-c", ckpt, "-o", tmp_path / "u.safetensors", "--kind",
                  "gradient", "--order", "parameters", "-b", "4", expect=2)
        assert_one_error_line(res.stderr, message)
    (tmp_path / "ok.npz").write_bytes(_savez(arrays))
    cli("import", "flower-npz", tmp_path / "ok.npz", "-c", ckpt, "-o", tmp_path / "u.safetensors", "--kind", "gradient",
        "--order", "parameters", "-b", "4")


def test_a_batch_size_that_contradicts_the_recorded_one_needs_force(cli, tmp_path):
    """Issue #20 item 2: -b 8 over a recorded B = 4 silently won."""
    ckpt, upd, _ = sample("lenet_b4")
    res = cli("labels", "llg", ckpt, upd, "-b", "8", "-q", expect=2)
    assert_one_error_line(res.stderr, "--batch-size 8 contradicts the batch size 4", "--force")
    assert json.loads(cli("labels", "llg", ckpt, upd, "-b", "8", "-q", "--force").stdout)["num_samples"] == 8
    assert json.loads(cli("labels", "llg", ckpt, upd, "-b", "4", "-q").stdout)["num_samples"] == 4
