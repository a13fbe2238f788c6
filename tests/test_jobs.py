"""The job layer: one Session and one resolver per kind of run; options declared once on the method; the
batch-size override applied once; the package layering the architecture document describes."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from fedaudit.attacks import ATTACKS
from fedaudit.defenses import DEFENSES
from fedaudit.errors import InputError
from fedaudit.io.checkpoint import Checkpoint, load_checkpoint
from fedaudit.io.files import write_safetensors
from fedaudit.io.update import load_update
from fedaudit.jobs import Aux, DefendJob, LabelJob, ReconstructJob, Session
from fedaudit.jobs.audit import parse_attack_options, parse_defense_rows
from fedaudit.labels import LABEL_METHODS
from fedaudit.methods import parse_spec, split_spec
from fedaudit.threat_model import ThreatModel, load_threat_model

from .helpers import ROOT, assert_one_error_line, load_sample, sample


def _without_batch_size(tmp_path: Path, name: str) -> Path:
    """A copy of a sample update whose metadata does not record the batch size."""
    src = sample(name)[1]
    with safe_open(str(src), framework="pt") as fh:
        meta = dict(fh.metadata())
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    meta.pop("fedaudit.batch_size")
    meta.pop("format", None)
    return write_safetensors(tmp_path / "no_b.safetensors", tensors, meta)


def test_batch_size_override_reaches_labels_and_attacks_alike(cli, tmp_path):
    ckpt = sample("lenet_b4")[0]
    upd = _without_batch_size(tmp_path, "lenet_b4")
    res = cli("reconstruct", "rgla", ckpt, upd, "-o", tmp_path / "none", "-q", expect=2)
    assert_one_error_line(res.stderr, "does not record fedaudit.batch_size; pass --batch-size")
    out = cli.json(cli("reconstruct", "rgla", ckpt, upd, "-o", tmp_path / "rgla", "-b", "4", "-n", "5", "-q"))
    assert out["status"] == "complete" and len(out["labels"]) == 4
    report = json.loads((tmp_path / "rgla" / "report.json").read_text())
    assert report["threat_model"]["batch_size"] == 4
    tm = load_threat_model(ckpt, upd, batch_size=4)
    assert tm.batch_size == 4 and tm.batch_size_source == "override"
    assert load_threat_model(ckpt, upd).batch_size_source is None
    res = cli("labels", "llg", ckpt, upd, "-b", "-2", "-q", expect=2)
    assert_one_error_line(res.stderr, "--batch-size must be >= 1")


def test_from_tensors_is_what_loading_the_files_gives():
    ckpt_path, upd_path, _ = sample("lenet_fedavg_k3")
    loaded = load_threat_model(ckpt_path, upd_path)
    upd = load_update(upd_path)
    built = ThreatModel.from_tensors(load_checkpoint(ckpt_path), upd.tensors, upd.meta)
    assert built.present == loaded.present and built.absent == loaded.absent
    for k in loaded.present:
        assert torch.equal(built.gradient[k], loaded.gradient[k])
    assert not built.train_bn and loaded.meta.bn_mode == built.meta.bn_mode
    with pytest.raises(InputError, match="not a parameter or buffer"):
        ThreatModel.from_tensors(Checkpoint.in_memory(loaded.spec, loaded.model), {"nope": torch.zeros(1)}, upd.meta)


def test_method_options_are_declared_once_and_parsed_one_way():
    fedleak = ATTACKS.get("fedleak")
    defaults = fedleak.default_options()
    assert defaults == {o.name: o.default for o in fedleak.options}
    assert fedleak.parse_options({"blend": "0.3", "signed": "yes", "tv": 1})["blend"] == 0.3
    assert fedleak.parse_options({"signed": "yes"})["signed"] is True
    assert fedleak.parse_options({"tv": 1})["tv"] == 1.0
    with pytest.raises(InputError, match="has no option 'nope'"):
        fedleak.parse_options({"nope": 1})
    with pytest.raises(InputError, match="--scope must be one of"):
        fedleak.parse_options({"scope": "everywhere"})
    with pytest.raises(InputError, match="not a finite number"):
        fedleak.parse_options({"tv": "nan"})
    assert split_spec("prune:0.5", "ratio") == ("prune", {"ratio": "0.5"})
    assert parse_spec(DEFENSES, "dp:eps=100")[1]["eps"] == 100.0
    with pytest.raises(InputError, match="needs the form option=value"):
        split_spec("dp:100:200", "clip")


def test_attack_specs_split_loop_settings_from_options():
    got = parse_attack_options(["fedleak:lr=0.03:tv=0.2:iterations=50", "ig:signed=false"])
    assert got == {"fedleak": {"tv": 0.2, "lr": 0.03, "iterations": 50}, "ig": {"signed": False}}
    with pytest.raises(InputError, match="--schedule must be one of"):
        parse_attack_options(["ig:schedule=weekly"])
    with pytest.raises(InputError, match="--lr must be > 0"):
        parse_attack_options(["ig:lr=-1"])
    rows = parse_defense_rows("none,prune:0.5+quantize:4")
    assert rows[0] == ("none", []) and [n for n, _ in rows[1][1]] == ["prune", "quantize"]


def test_reconstruct_job_resolves_defaults_once():
    tm, truth = load_sample("lenet_b4")
    job = ReconstructJob(Session(seed=3), tm, "fedleak", {"blend": 0.3}, {"iterations": 7, "lr": None})
    assert job.settings == {**{k: ATTACKS.get("fedleak").defaults[k] for k in ("restarts", "lr", "schedule")},
                            "iterations": 7, "restart-batch": 0, "cuda-graph": "auto"}
    assert job.options["blend"] == 0.3 and job.options["ratio"] == 0.5 and job.label_method == "auto"
    assert ReconstructJob(Session(), tm, "hfgi").label_method == "hfgi"
    labels = truth.labels.tolist()
    cfg = job.loop_config(labels)
    assert cfg.seed == 3 and cfg.iterations == 7 and cfg.quiet
    assert cfg.fingerprint != ReconstructJob(Session(seed=4), tm, "fedleak", {"blend": 0.3}, {"iterations": 7}).fingerprint(labels)
    with pytest.raises(InputError, match="--iterations must be > 0"):
        ReconstructJob(Session(), tm, "ig", loop={"iterations": 0})


def test_label_and_defend_jobs_use_the_session():
    tm, truth = load_sample("lenet_b4")
    a = LabelJob(Session(seed=0, aux=Aux.dummies(tm.spec, 64, 0)), tm, "zlg").run(truth)
    assert a["aux"] == {"kind": "dummy", "count": 64, "labelled": True} and a["metrics"]["InsAcc"] == 1.0
    assert a["inputs"]["update"]["sha256"] == tm.update.sha256
    with pytest.raises(InputError, match="needs auxiliary images"):
        LabelJob(Session(), tm, "zlg").run()
    job = DefendJob(Session(seed=1), tm, [("dp", {"sigma": 0.01}), ("prune", None)])
    r1, r2 = job.run(), DefendJob(Session(seed=1), tm, [("dp", {"sigma": 0.01}), ("prune", None)]).run()
    assert [r["name"] for r in r1.records] == ["dp", "prune"]
    assert all(torch.equal(r1.grads[k], r2.grads[k]) for k in r1.grads)  # the session's seed drives the noise
    defended = job.defended_threat_model(r1)
    assert defended.meta.kind == "gradient" and len(defended.meta.defenses) == 2
    with pytest.raises(InputError, match="needs the client's batch"):
        DefendJob(Session(), tm, [("soteria", None)]).run()


def test_defend_takes_a_device(cli, tmp_path):
    ckpt, upd, _ = sample("lenet_b1")
    out = cli.json(cli("defend", "quantize", ckpt, upd, "-o", tmp_path / "q.safetensors", "--bits", "4", "--device", "cpu", "-q"))
    assert out["defense"]["name"] == "quantize"
    res = cli("defend", "quantize", ckpt, upd, "-o", tmp_path / "r.safetensors", "--device", "cuda:7", "-q", expect=2)
    assert_one_error_line(res.stderr, "--device cuda:7")


def test_every_label_method_subcommand_comes_from_the_registry(cli):
    for name, method in LABEL_METHODS:
        help_text = cli("labels", name, "--help").stdout
        for option in method.options:
            assert f"--{option.name}" in help_text, (name, option.name)


# The layers of docs/architecture.md, bottom up: a module may import its own layer's and lower layers' packages.
LAYERS = [
    {"errors", "__init__"},
    {"registry", "device", "data", "progress"},
    {"models"},
    {"metrics", "io", "report"},
    {"conversion"},
    {"threat_model", "text_threat_model"},
    {"requirements", "session", "client", "channels"},
    {"methods"},
    {"labels", "attacks"},
    {"defenses", "verdict", "scan"},
    {"inspection", "text_inspection", "jobs", "integrations", "catalog"},
    {"cli", "__main__"},
]


def _layer(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def test_no_package_imports_a_layer_above_it():
    upward = []
    for path in (ROOT / "fedaudit").rglob("*.py"):
        unit = path.relative_to(ROOT / "fedaudit").with_suffix("").parts[0]
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                if parts[0] == "fedaudit":
                    target = parts[1] if len(parts) > 1 else "__init__"
                    if target != unit and _layer(target) > _layer(unit):
                        upward.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not upward, upward
    labels_in_attacks = [p for p in (ROOT / "fedaudit" / "attacks").rglob("*.py") if "fedaudit.labels" in p.read_text()]
    assert not labels_in_attacks  # attacks get labels from the job, never from a label method


def test_method_modules_register_in_a_neutral_registry_module():
    """Issue 66: a method module takes its registry from ``<package>/registry.py``, never from the package's
    ``__init__`` (which imports every module to register it): no import-order dependence, no cycle."""
    offenders = []
    for package, registry in (("labels", "LABEL_METHODS"), ("attacks", "ATTACKS"), ("defenses", "DEFENSES")):
        for path in (ROOT / "fedaudit" / package).rglob("*.py"):
            if path.name in ("__init__.py", "registry.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == f"fedaudit.{package}" and \
                        any(a.name == registry for a in node.names):
                    offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, offenders
    from fedaudit.attacks import ATTACKS
    from fedaudit.defenses import DEFENSES
    from fedaudit.labels import LABEL_METHODS

    assert len(list(LABEL_METHODS)) == 16 and len(list(ATTACKS)) == 9 and len(list(DEFENSES)) >= 6
