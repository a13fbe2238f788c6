"""The published JSON Schemas of the stdout documents (docs/schema/), read once, and a validator for the tests."""

from __future__ import annotations

import functools
import json

from .helpers import ROOT


@functools.cache
def _validator(command: str):
    from jsonschema import Draft202012Validator

    schema = json.loads((ROOT / "docs" / "schema" / f"{command}.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate(command: str | None, text: str) -> None:
    """Raise AssertionError with every violation when ``text`` (a document's JSON) breaks ``command``'s schema."""
    assert command, "a typed document without a command"
    errors = sorted(_validator(command).iter_errors(json.loads(text)), key=lambda e: list(e.path))
    assert not errors, f"{command} document breaks docs/schema/{command}.json: " + "; ".join(
        f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in errors[:5])
