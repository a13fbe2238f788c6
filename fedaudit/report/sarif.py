"""SARIF 2.1.0 output (``--format sarif``), so that a code-scanning page (GitHub, GitLab, Azure DevOps) shows a
finding with its level. One rule per check (scan) or per command's verdict; one result per finding. The JSON stays
the default; docs/usage.md, "Exit codes and output formats"."""

from __future__ import annotations

from typing import Any

from fedaudit import __version__

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# scan severities and risk bands to SARIF levels: "error" fails a code-scanning check, "note" only informs
LEVELS = {"high": "error", "very_high": "error", "medium": "warning", "info": "note", "low": "note"}


def sarif_log(rules: list[dict[str, Any]], results: list[dict[str, Any]], exit_code: int = 0) -> dict[str, Any]:
    """A SARIF log of one run of fedaudit: ``rules`` ({"id", "name", "text", "help"}), ``results`` ({"rule",
    "level", "message", "uri", "logical", "properties"})."""
    index = {r["id"]: i for i, r in enumerate(rules)}
    return {
        "$schema": SCHEMA, "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "fedaudit", "version": __version__,
                                "rules": [{"id": r["id"], "name": r["name"], "shortDescription": {"text": r["text"]},
                                           "help": {"text": r["help"]}} for r in rules]}},
            "invocations": [{"executionSuccessful": True, "exitCode": exit_code}],
            "results": [{
                "ruleId": x["rule"], "ruleIndex": index[x["rule"]], "level": x["level"],
                "message": {"text": x["message"]},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": x["uri"]}},
                               **({"logicalLocations": [{"name": x["logical"], "kind": "member"}]}
                                  if x.get("logical") else {})}],
                "properties": x.get("properties", {})} for x in results],
        }],
    }


def _uri(path: str) -> str:
    return path.replace("\\", "/")


def scan_sarif(doc: dict[str, Any], exit_code: int = 0) -> dict[str, Any]:
    """A scan document (fedaudit/jobs/scan.py) as SARIF: one rule per check that found something."""
    rules: dict[str, dict[str, Any]] = {}
    results = []
    for f in doc["findings"]:
        rid = f"fedaudit.scan/{f['check']}"
        rules.setdefault(rid, {"id": rid, "name": f["check"], "text": f["statistic"],
                               "help": f"Indicates: {f['indicates']}. Recovers: {f['recovers']}. docs/scan.md"})
        results.append({"rule": rid, "level": LEVELS[f["severity"]], "uri": _uri(doc["checkpoint"]["path"]),
                        "logical": f["tensor"],
                        "message": (f"{f['tensor']}: {f['statistic']} = {f['value']} (benign: {f['benign']}); "
                                    f"indicates {f['indicates']}; {f['detail']}").rstrip("; "),
                        "properties": {"severity": f["severity"], "value": f["value"]}})
    return sarif_log(list(rules.values()), results, exit_code)


def verdict_sarif(command: str, path: str, band: str | None, source: str, message: str,
                  exit_code: int = 0) -> dict[str, Any]:
    """A run's leakage verdict (reconstruct, audit, a round's clients) as one SARIF result at its band's level."""
    rid = f"fedaudit.{command}/leakage"
    rule = {"id": rid, "name": "leakage", "text": "the update's leakage risk band",
            "help": "low / medium / high / very high, measured against the truth or estimated without it; "
                    "docs/metrics.md"}
    results = [] if band is None else [{"rule": rid, "level": LEVELS.get(band, "warning"), "uri": _uri(path),
                                        "message": message, "properties": {"band": band, "source": source}}]
    return sarif_log([rule], results, exit_code)
