"""`--format sarif` (issue 89): reconstruct, audit and audit-round print SARIF 2.1.0 whose results carry each band at
its level and whose exit code is the command's."""

from __future__ import annotations

import json

from .test_scan import _imprint_case, _round


def _check(log: dict) -> dict:
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    for r in run["results"]:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"] and r["level"] in ("error", "warning", "note")
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    return run


def test_reconstruct_and_audit_print_sarif_at_the_bands_level(cli, tmp_path):
    ck, upd, truth = _imprint_case(tmp_path, cli)
    r = cli("reconstruct", "imprint", ck, upd, "-o", tmp_path / "out", "--truth", truth, "--format", "sarif",
            "--fail-on", "high", "-q", expect=1)
    run = _check(json.loads(r.stdout))
    assert [x["level"] for x in run["results"]] == ["error"] and run["invocations"][0]["exitCode"] == 1
    assert run["results"][0]["properties"]["band"] == "very_high"
    r = cli("audit", ck, upd, "--truth", truth, "-o", tmp_path / "audit", "--attacks", "imprint", "--defenses",
            "none,quantize:bits=2", "--format", "sarif", "-q")
    run = _check(json.loads(r.stdout))
    assert {x["properties"]["defense"] for x in run["results"]} == {"none", "quantize:bits=2"}
    assert run["invocations"][0]["exitCode"] == 0  # --fail-on never


def test_audit_round_sarif_carries_the_servers_findings(cli, tmp_path):
    folder = _round(tmp_path / "loki", "loki")
    # client001 trained from its own model, so its update is refused as that client's error row (exit 2)
    r = cli("audit-round", folder, "-o", tmp_path / "out", "--attacks", "none", "--labels", "idlg", "--format",
            "sarif", "-q", expect=2)
    run = _check(json.loads(r.stdout))
    server = [x for x in run["results"] if x["ruleId"] == "fedaudit.scan/round-consistency"]
    assert len(server) == 2 and {x["level"] for x in server} == {"error"}  # its recorded base, its received model
    assert all(x["message"]["text"].startswith("client001") for x in server)
