"""A truth recorded for another update is refused (it would measure another batch and band the run 'low')."""

from __future__ import annotations

import json

import pytest

from fedaudit.errors import InputError
from fedaudit.io.truth import check_truth, load_truth

from .helpers import assert_one_error_line, sample


def test_the_truth_of_another_update_is_an_input_error_by_default(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b4")
    other = sample("lenet_b1")[2]  # the truth file records lenet_b1's update hash
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "o", "-n", "5", "--truth", other,
              "--fail-on", "high", expect=2)
    assert_one_error_line(res.stderr, "captured with another update", "--truth-mismatch warn")
    assert not (tmp_path / "o").exists()
    res = cli("labels", "auto", ckpt, upd, "--truth", other, expect=2)
    assert_one_error_line(res.stderr, "captured with another update")
    res = cli("audit", ckpt, upd, "--truth", other, "-o", tmp_path / "a", "--attacks", "ig", "-n", "5", expect=2)
    assert_one_error_line(res.stderr, "captured with another update")


def test_warn_measures_anyway_and_says_so(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b1")
    other = sample("lenet_b4")[2]
    res = cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "o", "-n", "5", "--truth", other,
              "--truth-mismatch", "warn", expect=None)
    assert res.exit_code in (0, 1), res.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert "captured with another update" in report["truth_mismatch"]
    assert "the measured band is not this update's" in res.stderr


def test_a_truth_without_a_recorded_hash_or_the_same_hash_passes():
    truth = load_truth(sample("lenet_b1")[2])
    assert check_truth(truth, truth.update_sha256) is None
    assert check_truth(truth, None) is None
    with pytest.raises(InputError, match="--truth-mismatch must be one of"):
        check_truth(truth, "0" * 64, "ignore")
