"""The published JSON Schemas (docs/schema/: the stdout documents and report.json), read once, and a validator for
the tests."""

from __future__ import annotations

import functools
import json

from .helpers import ROOT


@functools.cache
def _validator(name: str):
    from jsonschema import Draft202012Validator

    schema = json.loads((ROOT / "docs" / "schema" / f"{name}.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate(command: str | None, text: str) -> None:
    """Raise AssertionError with every violation when ``text`` (a document's JSON) breaks ``command``'s schema
    (``report`` for a report.json)."""
    assert command, "a typed document without a command"
    errors = sorted(_validator(command).iter_errors(json.loads(text)), key=lambda e: list(e.path))
    assert not errors, f"{command} document breaks docs/schema/{command}.json: " + "; ".join(
        f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in errors[:5])
