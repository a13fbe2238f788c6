"""The model-zoo benchmark (benchmarks/model_zoo.py, issue 87) as a slow smoke: a conv classifier goes through every
command without an exit 3, its labels refused with its layer named (MobileNetV3, GoogLeNet, MNASNet and the ViT have
their own quicker tests in tests/test_model_compat.py and tests/test_import_cli.py)."""

from __future__ import annotations

import pytest

from benchmarks.model_zoo import STEPS, zoo_row


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet1_1"])
def test_a_torchvision_builder_runs_every_step_or_is_refused_with_a_reason(name):
    row = zoo_row(name, 32, limit=600)
    exits = {step: row["steps"][step]["exit"] for step in STEPS}
    assert 3 not in exits.values() and None not in [exits["import"], exits["capture"]], row
    if name == "squeezenet1_1":
        assert exits["labels"] == 2 and "classifier.1, a Conv2d" in row["steps"]["labels"]["message"]
    else:
        assert set(exits.values()) == {0}, row
        assert row["measured"]["band"] in ("low", "medium", "high", "very_high")
