"""The typed stdout documents and their published JSON Schemas (issue 66): current, and every document valid."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fedaudit.report import schema
from fedaudit.report.audit_record import AUDIT_SCHEMA_VERSION
from fedaudit.report.run_report import REPORT_SCHEMA_VERSION, RunReport
from fedaudit.report.types import DOCUMENTS, STDOUT_SCHEMA_VERSION, LabelsResult, build

from .helpers import ROOT, sample
from .schemas import validate


def test_the_published_schemas_are_generated_from_the_types():
    # the repository's published files (an installed fedaudit has no docs/ beside it)
    assert schema.main(["--check", "--out", str(ROOT / "docs" / "schema")]) == 0, "run: python -m fedaudit.report.schema"
    assert set(DOCUMENTS) == {"reconstruct", "labels", "inspect", "score", "audit", "audit-round", "defend", "capture",
                              "reconstruct-text", "inspect-text", "capture-text", "scan"}


@pytest.mark.slow
def test_each_typed_command_prints_a_document_its_schema_accepts(cli, tmp_path):
    ckpt, upd, truth = sample("lenet_b1")
    docs = {"inspect": cli.json(cli("inspect", ckpt, upd, "-q")),
            "labels": cli.json(cli("labels", "idlg", ckpt, upd, "--truth", truth, "-q")),
            "reconstruct": cli.json(cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "r", "-n", "3",
                                        "--proxies", "0", "-q"))}
    docs["score"] = cli.json(cli("score", tmp_path / "r" / "reconstruction.safetensors", "--truth", truth, "-o",
                                 tmp_path / "s", "-q"))
    docs["defend"] = cli.json(cli("defend", "prune", ckpt, upd, "-o", tmp_path / "d.safetensors", "--ratio", "0.5",
                                  "-q"))
    docs["capture"] = cli.json(cli("capture", ckpt, truth, "-b", "1", "-o", tmp_path / "c.safetensors", "-q"))
    docs["audit"] = cli.json(cli("audit", ckpt, upd, "--truth", truth, "-o", tmp_path / "a", "--attacks", "ig",
                                 "--defenses", "none,prune:0.5", "-n", "3", "-q"))
    for command, doc in docs.items():
        assert doc["schema_version"] == STDOUT_SCHEMA_VERSION and doc["command"] == command
        validate(command, json.dumps(doc))
    for folder in ("r", "s"):  # report.json of reconstruct and of score: every field present, nothing else
        record = json.loads((tmp_path / folder / "report.json").read_text())
        assert record["schema_version"] == REPORT_SCHEMA_VERSION
        validate("report", json.dumps(record))
        assert set(record) == {f.name for f in dataclasses.fields(RunReport)}
    record = json.loads((tmp_path / "a" / "audit.json").read_text())  # audit.json likewise
    assert record["schema_version"] == AUDIT_SCHEMA_VERSION and len(record["cells"]) == 2
    validate("audit-record", json.dumps(record))
    assert docs["reconstruct"]["risk_band"] is None  # no truth: present, and null
    assert docs["reconstruct"]["risk_band_estimated"] in ("low", "medium", "high", "very_high")


def test_a_document_that_drifts_from_its_type_is_caught():
    with pytest.raises(TypeError, match="no field"):
        build(LabelsResult, {"method": "idlg", "surprise": 1})
    ok = build(LabelsResult, {"method": "idlg"})
    with pytest.raises(AssertionError, match="labels document breaks"):
        validate("labels", json.dumps(ok))  # required fields null where the schema wants values
    doc = {**ok, "extra": 1}
    with pytest.raises(AssertionError, match="Additional properties"):
        validate("labels", json.dumps(doc))
    with pytest.raises(TypeError, match="no field"):  # report.json's types are as strict, nested parts too
        RunReport.of({"tool": {}, "command": "score", "metrics": {"summary": {"psnr": None, "fid": None}}})
