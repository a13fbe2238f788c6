"""``auto`` as data (issue 66): the facts computed once, the ordered route table, the per-method facts and the one
calibration module. Each route is tested on the facts where it applies and where it must not."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.auto_routes import calibration, table
from fedaudit.labels.auto_routes.common import rules_order
from fedaudit.labels.auto_routes.delta import ensemble_members
from fedaudit.labels.auto_routes.table import ROUTES, Features

from .helpers import ROOT

BASE = Features(strategy="hybrid", spread=0.5, min_feature=0.0, batch_size=8, multi_step=False, exact=False,
                rules_exact=False, batch_statistics=False, input_independent=False)


def facts(**changes) -> Features:
    return dataclasses.replace(BASE, **changes)


# route -> (facts where it applies, facts where it must not)
CASES = {
    "integrality": (facts(spread=0.1, rules_exact=True), facts()),
    "hidden-split": (facts(), facts(spread=0.1, rules_exact=True)),
    "sample-split": (facts(), facts(exact=True)),
    "bn-mixture": (facts(multi_step=True, batch_statistics=True), facts(multi_step=True, batch_statistics=True,
                                                                        input_independent=True)),
    "class-count": (facts(multi_step=True), facts(strategy="evidence")),
    "client-fit": (facts(multi_step=True), facts(multi_step=True, batch_statistics=True)),
    "rlu-input-independent": (facts(multi_step=True, batch_statistics=True, input_independent=True, spread=0.05),
                              facts(multi_step=True, batch_statistics=True)),
    "ensemble": (facts(multi_step=True), facts()),
    "evidence": (facts(), facts(exact=True)),
    "rules": (facts(exact=True), None),
}


def test_the_table_has_one_test_case_per_route_in_order():
    assert [r.name for r in ROUTES] == list(CASES)
    assert ROUTES[-1].name == "rules" and all(r.why for r in ROUTES)


@pytest.mark.parametrize("name", list(CASES))
def test_each_route_applies_where_it_should_and_not_elsewhere(name):
    route = next(r for r in ROUTES if r.name == name)
    yes, no = CASES[name]
    assert route.applies(yes)
    if no is not None:
        assert not route.applies(no)


def test_the_fallback_strategy_follows_the_update():
    assert facts(spread=0.1, rules_exact=True).fallback == "rules"
    assert facts(multi_step=True).fallback == "ensemble" and facts().fallback == "evidence"
    assert facts(strategy="ensemble").fallback == "ensemble"
    only = [r.name for r in ROUTES if r.applies(facts(strategy="rules"))]
    assert only == ["rules"]  # --strategy rules: the rules alone
    assert [r.name for r in ROUTES if r.applies(facts(strategy="evidence"))] == ["evidence", "rules"]


def test_per_method_facts_are_attributes_of_the_methods():
    assert rules_order(False) == ("bias-count", "zlg", "ilrg", "llg", "hfgi", "fedleak", "gdbr")
    assert rules_order(True) == ("llg", "hfgi", "zlg", "bias-count", "ilrg", "fedleak", "gdbr")
    assert ensemble_members() == ("bias-count", "zlg", "ilrg", "llg", "llg-plus", "rlu")
    aware = {name for name, m in LABEL_METHODS if m.multi_step_aware}
    assert aware == {"rlu", "fedleak", "gdbr", "client-fit", "bn-count"}


def test_every_threshold_lives_in_the_calibration_module_with_its_provenance():
    for c in calibration.CALIBRATION.values():
        assert c.value == getattr(calibration, c.name)
        assert c.decides and c.chosen_on and c.held_out and c.source and c.date.startswith("2026-")
    # no route module defines a number of its own (DUMMIES is the probe's size, not a threshold)
    stray = []
    for path in (ROOT / "fedaudit" / "labels" / "auto_routes").glob("*.py"):
        if path.name == "calibration.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, (int, float)) and not isinstance(node.value.value, bool):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if names != ["DUMMIES"]:
                    stray.append(f"{path.name}: {names}")
    assert not stray, stray


@pytest.mark.parametrize("name,route", [("lenet_b1", "rules"), ("lenet_b4", "integrality"),
                                        ("lenet_fedavg_k3", "client-fit")])
def test_auto_names_the_route_that_answered(cli, name, route):
    from .helpers import sample

    ckpt, upd, _ = sample(name)
    out = cli.json(cli("labels", "auto", ckpt, upd, "--aux", "builtin:cifar10", "-q"))
    assert out["diagnostics"]["route"] == route
    assert table.STRATEGIES == ("hybrid", "evidence", "rules", "ensemble")
