"""Files fedaudit writes are files fedaudit reads: update metadata is checked by the reader's rules before writing."""

from __future__ import annotations

import pytest

from fedaudit.errors import InputError
from fedaudit.io.update import UpdateMeta, save_update

from .helpers import assert_one_error_line, sample


@pytest.mark.parametrize("flags, fragment", [
    (("--lr", "nan"), "needs --lr, a finite step size > 0"), (("--lr", "inf"), "needs --lr, a finite step size > 0"),
    (("--lr", "0.1", "--momentum", "1.5"), "--momentum must be in [0, 1)"),
    (("--lr", "0.1", "--momentum", "nan"), "--momentum must be in [0, 1)"),
])
def test_capture_refuses_a_recipe_it_could_not_read_back(cli, tmp_path, flags, fragment):
    ckpt, _, truth = sample("lenet_b4")
    out = tmp_path / "u.safetensors"
    res = cli("capture", ckpt, truth, "-b", "4", "-k", "2", *flags, "-o", out, expect=2)
    assert_one_error_line(res.stderr, fragment)
    assert not out.exists()


@pytest.mark.parametrize("changes, fragment", [
    ({"local_lr": float("nan")}, "local_lr"), ({"optimizer": {"name": "sgd", "momentum": 1.5}}, "momentum"),
    ({"optimizer": {"name": "sgd", "weight_decay": float("inf")}}, "weight_decay"), ({"batch_size": 0}, "batch_size"),
])
def test_save_update_checks_the_metadata_by_the_readers_rules(tmp_path, changes, fragment):
    import torch

    meta = UpdateMeta(**{"kind": "delta", "delta_sign": "local_minus_global", "batch_size": 4, "local_steps": 2,
                         "local_lr": 0.1, **changes})
    out = tmp_path / "u.safetensors"
    with pytest.raises(InputError, match=fragment):
        save_update(out, {"w": torch.zeros(2)}, meta)
    assert not out.exists()


@pytest.mark.parametrize("flags, fragment", [
    (("--std", "nan"), "not finite"), (("--mean", "inf"), "not finite"), (("--std", "-inf"), "must be > 0"),
    (("--input-shape", "3,100000,100000"), "not plausible"), (("--input-shape", "100,32,32"), "not plausible"),
])
def test_init_checkpoint_refuses_what_a_checkpoint_reader_would(cli, tmp_path, flags, fragment):
    out = tmp_path / "c.safetensors"
    res = cli("init-checkpoint", "lenet", "-o", out, *flags, expect=2)
    assert_one_error_line(res.stderr, fragment)
    assert not out.exists()


@pytest.mark.parametrize("key, value, fragment", [("fedaudit.std", "[NaN]", "not finite"),
                                                  ("fedaudit.mean", "[0.5, Infinity, 0.5]", "not finite"),
                                                  ("fedaudit.std", "[0.0]", "must be > 0")])
def test_a_checkpoint_whose_normalisation_is_not_finite_is_refused(cli, tmp_path, key, value, fragment):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    ckpt, upd, _ = sample("lenet_b1")
    with safe_open(str(ckpt), "pt") as fh:
        meta = dict(fh.metadata())
    bad = tmp_path / "c.safetensors"
    save_file(load_file(str(ckpt)), str(bad), metadata={**meta, key: value})
    res = cli("inspect", bad, upd, expect=2)
    assert_one_error_line(res.stderr, fragment)
