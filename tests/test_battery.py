"""The hostile battery, generated (issue 64): every numeric option of every registered method and every shared
numeric flag, fed NaN, infinities and negatives, through the CLI as a reviewer's CI would. Each case asserts the
contract: exit 2, exactly one line on stderr (the error), nothing on stdout, no output left behind."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from fedaudit.catalog import family

from .helpers import assert_one_error_line, sample


@pytest.fixture
def cli(capsys, monkeypatch):
    """The installed entry point's main() in process (Click's usage errors become one line there, as in a shell)."""
    from fedaudit.cli.app import main

    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("FEDAUDIT_PROXIES", "0")
    monkeypatch.setenv("FEDAUDIT_PROGRESS", "off")

    def run(*args, expect=None):
        monkeypatch.setattr(sys, "argv", ["fedaudit", *map(str, args)])
        with pytest.raises(SystemExit) as stopped:
            main()
        out = capsys.readouterr()
        return SimpleNamespace(exit_code=stopped.value.code, stdout=out.out, stderr=out.err)

    return run

CKPT, UPD, TRUTH = sample("lenet_b1")
BAD_FLOATS = ("nan", "inf", "-inf", "-1")
BAD_INTS = ("-1",)


def _method_cases(kind: str, command: list[str]) -> list[tuple[str, list[str], str]]:
    cases = []
    for name, info in family(kind):
        for o in info.options:
            if o.type is float:
                values = BAD_FLOATS
            elif o.type is int:
                values = BAD_INTS
            else:
                continue
            for v in values:
                cases.append((f"{' '.join(command)} {name} --{o.name} {v}", [*command, name, f"--{o.name}={v}"], o.name))
    return cases


ATTACK_CASES = _method_cases("attacks", ["reconstruct"])
LABEL_CASES = _method_cases("labels", ["labels"])
DEFENSE_CASES = _method_cases("defenses", ["defend"])
SHARED = [  # (flag, bad value, a fragment of the error)
    ("--iterations", "0", "> 0"), ("--iterations", "-5", "> 0"), ("--restarts", "0", "> 0"),
    ("--lr", "nan", "finite"), ("--lr", "inf", "finite"), ("--lr", "0", "> 0"), ("--lr", "-0.1", "> 0"),
    ("--restart-batch", "-1", ">= 0"), ("--proxies", "-1", ">= 0"), ("--num-dummy", "-5", ">= 1"),
    ("--num-dummy", "0", ">= 1"), ("--batch-size", "0", ""), ("--batch-size", "-3", ""), ("--self-check", "-1", ""),
    ("--checkpoint-every", "-1", ""), ("--gate", "middle", ""), ("--truth-mismatch", "ignore", ""),
    ("--progress", "loud", ""), ("--fail-on", "huge", ""), ("--schedule", "nope", ""), ("--iterations", "nan", ""),
]


def _check(res, out) -> None:
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    assert_one_error_line(res.stderr)
    assert res.stdout == ""
    assert not out.exists()


@pytest.mark.parametrize("case, args, option", ATTACK_CASES, ids=[c[0] for c in ATTACK_CASES])
def test_every_attack_option_refuses_non_finite_and_negative_values(cli, tmp_path, case, args, option):
    out = tmp_path / "out"
    res = cli(*args, CKPT, UPD, "-o", out, "-n", "2", expect=None)
    _check(res, out)
    assert option in res.stderr


@pytest.mark.parametrize("case, args, option", LABEL_CASES, ids=[c[0] for c in LABEL_CASES])
def test_every_label_option_refuses_non_finite_and_negative_values(cli, tmp_path, case, args, option):
    out = tmp_path / "labels.json"
    res = cli(*args, CKPT, UPD, "-o", out, expect=None)
    _check(res, out)


@pytest.mark.parametrize("case, args, option", DEFENSE_CASES, ids=[c[0] for c in DEFENSE_CASES])
def test_every_defense_option_refuses_non_finite_and_negative_values(cli, tmp_path, case, args, option):
    out = tmp_path / "defended.safetensors"
    res = cli(*args, CKPT, UPD, "--batch", TRUTH, "-o", out, expect=None)
    _check(res, out)


@pytest.mark.parametrize("flag, value, fragment", SHARED, ids=[f"{f} {v}" for f, v, _ in SHARED])
def test_every_shared_numeric_flag_of_reconstruct_refuses_bad_values(cli, tmp_path, flag, value, fragment):
    out = tmp_path / "out"
    res = cli("reconstruct", "ig", CKPT, UPD, "-o", out, "-n" if flag != "--iterations" else "--restarts", "1",
              flag, value, expect=None)
    _check(res, out)
    assert fragment in res.stderr
