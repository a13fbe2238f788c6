"""``fedaudit inspect`` on every shipped sample, NaN handling, and the streams of a real subprocess."""

from __future__ import annotations

import json

import pytest
import torch

from fedaudit.io.files import read_safetensors, write_safetensors

from .helpers import SAMPLE_NAMES, assert_one_error_line, run_module, sample


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_inspect_every_sample(cli, name):
    ckpt, upd, _ = sample(name)
    info = cli.json(cli("inspect", ckpt, upd, "-q"))
    assert info["finite"] and info["kind"] in ("gradient", "delta", "weights")
    assert set(info["parameters_present"]) | set(info["parameters_absent"]) == {r["name"] for r in info["layers"]}
    for row in info["layers"]:
        assert (row["grad_norm"] is not None and row["grad_norm"] >= 0) == row["present"]
    assert isinstance(info["label_methods"], dict) and isinstance(info["attacks"], dict)


def test_inspect_reports_restriction_and_steps(cli):
    info = cli.json(cli("inspect", *sample("mlp_mnist_withheld")[:2], "-q"))
    assert info["parameters_absent"] == ["fc.weight"] and info["restricted"]
    assert not info["defenses"]["soteria"]["applicable"] and info["defenses"]["soteria"]["needs_client_batch"]
    assert not info["attacks"]["rgla"]["applicable"]  # the output layer's weight gradient is withheld
    info = cli.json(cli("inspect", *sample("lenet_fedavg_k3")[:2], "-q"))
    assert (info["kind"], info["local_steps"], info["batch_size"]) == ("delta", 3, 4)
    assert not info["defenses"]["refiner"]["applicable"] and info["defenses"]["prune"]["applicable"]


def test_inspect_nan_prints_json_then_exits_2(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b1")
    tensors, meta = read_safetensors(upd, "update")
    tensors["fc.bias"][3] = float("nan")
    write_safetensors(tmp_path / "nan.safetensors", tensors, {k: v for k, v in meta.items() if k != "format"})
    res = cli("inspect", ckpt, tmp_path / "nan.safetensors", "-q", expect=2)
    info = json.loads(res.stdout)
    assert not info["finite"] and info["nonfinite_tensors"] == ["fc.bias"]
    assert_one_error_line(res.stderr, "NaN or Inf", "fc.bias")


@pytest.mark.slow
def test_subprocess_streams_and_output_file(tmp_path):
    ckpt, upd, _ = sample("lenet_b4")
    proc = run_module("inspect", ckpt, upd)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["batch_size"] == 4  # stdout is pure JSON
    assert "fc.weight" in proc.stderr  # the table for people is on stderr
    proc = run_module("inspect", ckpt, upd, "-q", "-o", tmp_path / "i.json")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert json.loads((tmp_path / "i.json").read_text())["kind"] == "gradient"
    assert torch.__version__  # same interpreter as the subprocess


@pytest.mark.slow
def test_console_script_is_installed():
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "fedaudit"
    assert script.exists() or shutil.which("fedaudit")
    proc = subprocess.run([str(script if script.exists() else "fedaudit"), "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("fedaudit ")
