"""JSON Schemas of the stdout documents (fedaudit/report/types.py) and of the records written into output folders
(report.json: fedaudit/report/run_report.py; audit.json: fedaudit/report/audit_record.py; audit_round.json:
fedaudit/report/round_record.py), generated from their types.

    .venv/bin/python -m fedaudit.report.schema            # docs/schema/<command>.json and the records' schemas
    .venv/bin/python -m fedaudit.report.schema --check    # exit 1 when a published file is stale

Generation uses pydantic (a development dependency: the ``dev`` extra), never at run time. Every field of a
document is required (it is always present, ``null`` when nothing was measured); no other key is allowed except
``non_finite``, the list the JSON writer adds when a number could not be computed (fedaudit/io/files.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fedaudit.report.audit_record import AUDIT_SCHEMA_VERSION, AuditRecord
from fedaudit.report.round_record import ROUND_SCHEMA_VERSION, RoundRecord
from fedaudit.report.run_report import REPORT_SCHEMA_VERSION, RunReport
from fedaudit.report.text_report import TEXT_REPORT_SCHEMA_VERSION, TextReport
from fedaudit.report.types import DOCUMENTS, STDOUT_SCHEMA_VERSION, Document

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schema"


def _close(schema: dict[str, Any]) -> None:
    """Every object of a document type: all its fields required, nothing else allowed (open dicts stay open)."""
    for node in [schema, *schema.get("$defs", {}).values()]:
        if node.get("type") == "object" and "properties" in node:
            node["required"] = list(node["properties"])
            node["additionalProperties"] = False


def schema_of(kind: type[Document]) -> dict[str, Any]:
    from pydantic import TypeAdapter

    schema = TypeAdapter(kind).json_schema(mode="serialization")
    _close(schema)
    command = kind.command
    name = kind.schema_name or command
    schema["properties"] = {
        "schema_version": {"type": "string", "const": STDOUT_SCHEMA_VERSION},
        "command": {"type": "string", "const": command},
        **schema["properties"],
        "non_finite": NON_FINITE,
    }
    schema["required"] = ["schema_version", "command", *schema["required"]]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://fedaudit.invalid/schema/{name}.json", **schema}


NON_FINITE = {"type": "array", "items": {"type": "string"},
              "description": "JSON paths of numbers that could not be computed (written as null)"}


# the records written into an output folder: schema file -> (type, its schema version)
RECORDS: dict[str, tuple[type, str]] = {"report": (RunReport, REPORT_SCHEMA_VERSION),
                                        "audit-record": (AuditRecord, AUDIT_SCHEMA_VERSION),
                                        "round-record": (RoundRecord, ROUND_SCHEMA_VERSION),
                                        "text-report": (TextReport, TEXT_REPORT_SCHEMA_VERSION)}


def record_schema(name: str) -> dict[str, Any]:
    """The schema of a record a run writes into its output folder (report.json of ``reconstruct`` and ``score``,
    audit.json of ``audit``)."""
    from pydantic import TypeAdapter

    kind, version = RECORDS[name]
    schema = TypeAdapter(kind).json_schema(mode="serialization")
    _close(schema)
    schema["properties"]["schema_version"] = {"type": "string", "const": version}
    schema["properties"]["non_finite"] = NON_FINITE
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"https://fedaudit.invalid/schema/{name}.json",
            **schema}


def render(kind: type[Document]) -> str:
    return json.dumps(schema_of(kind), indent=2, sort_keys=False) + "\n"


def files() -> dict[str, str]:
    """Every published schema: file name -> text."""
    out = {f"{command}.json": render(kind) for command, kind in DOCUMENTS.items()}
    out.update({f"{name}.json": json.dumps(record_schema(name), indent=2, sort_keys=False) + "\n" for name in RECORDS})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the published files instead of writing")
    ap.add_argument("--out", type=Path, default=SCHEMA_DIR)
    args = ap.parse_args(argv)
    stale = []
    for name, text in files().items():
        path = args.out / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale (run python -m fedaudit.report.schema): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
