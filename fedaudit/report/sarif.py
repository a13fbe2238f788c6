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


def add_finding(rules: dict[str, dict[str, Any]], results: list[dict[str, Any]], f: dict[str, Any], uri: str,
                message: str, **props: Any) -> None:
    """A scan finding (fedaudit/scan/finding.py, JSON) as a result of its check's rule, the rule added once."""
    rid = f"fedaudit.scan/{f['check']}"
    rules.setdefault(rid, {"id": rid, "name": f["check"], "text": f["statistic"],
                           "help": f"Indicates: {f['indicates']}. Recovers: {f['recovers']}. docs/scan.md"})
    results.append({"rule": rid, "level": LEVELS[f["severity"]], "uri": _uri(uri), "logical": f["tensor"],
                    "message": message, "properties": {"severity": f["severity"], **props}})


def scan_sarif(doc: dict[str, Any], exit_code: int = 0) -> dict[str, Any]:
    """A scan document (fedaudit/jobs/scan.py) as SARIF: one rule per check that found something."""
    rules: dict[str, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    for f in doc["findings"]:
        add_finding(rules, results, f, doc["checkpoint"]["path"],
                    (f"{f['tensor']}: {f['statistic']} = {f['value']} (benign: {f['benign']}); "
                     f"indicates {f['indicates']}; {f['detail']}").rstrip("; "), value=f["value"])
    return sarif_log(list(rules.values()), results, exit_code)


LEAKAGE_HELP = ("the update's leakage risk band (low / medium / high / very high): measured against the truth where "
                "given, else estimated without it, at the end of its range --gate reads; docs/metrics.md")


def leakage_sarif(command: str, summary: dict[str, Any], update: str, exit_code: int = 0,
                  round_dir: str | None = None) -> dict[str, Any]:
    """``reconstruct``, ``audit`` or ``audit-round``'s stdout document (fedaudit/report/types.py) as SARIF: one result
    per run, per audit cell, per round client, at its band's level; a round's server findings as scan results."""
    rid = f"fedaudit.{command}/leakage"
    rules = {rid: {"id": rid, "name": "leakage", "text": "leakage risk of a recorded client update", "help": LEAKAGE_HELP}}
    results: list[dict[str, Any]] = []

    def add(band: str | None, uri: str, message: str, logical: str | None = None, **props: Any) -> None:
        if band:
            results.append({"rule": rid, "level": LEVELS.get(band, "warning"), "uri": _uri(uri), "logical": logical,
                            "message": message, "properties": {"band": band, **props}})

    if command == "reconstruct":
        band = summary.get("band_for_fail_on") or summary.get("risk_band") or summary.get("risk_band_estimated")
        add(band, update, f"{summary['attack']}: leakage risk {band} ({summary.get('band_source') or 'estimated'}); "
            f"report in {summary['out']}", summary["attack"], source=summary.get("band_source"))
    elif command == "audit":
        for c in summary["cells"]:
            band = c.get("band_for_fail_on") or c.get("risk_band")
            add(band, update, f"{c['attack']} under defense {c['defense']}: leakage risk {band}",
                f"{c['defense']}/{c['attack']}", defense=c["defense"], attack=c["attack"])
    elif command == "audit-round":
        folder = round_dir or update
        for c in summary["clients"]:
            add(c.get("band"), f"{folder}/clients/{c['client']}.safetensors",
                f"client {c['client']}: leakage risk {c.get('band')} (estimated)", c["client"])
        for f in summary.get("server_findings") or []:
            add_finding(rules, results, f, folder, f"{f['tensor']}: {f['detail']}")
    else:
        raise ValueError(f"no SARIF form for {command!r}")
    return sarif_log(list(rules.values()), results, exit_code)
