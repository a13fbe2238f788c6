"""Typed reading of ``fedaudit.*`` safetensors metadata (every value is an untrusted string)."""

from __future__ import annotations

import builtins
import json
from typing import Any

from fedaudit.errors import InputError

NS = "fedaudit."
SCHEMA_VERSION = "1"


class Meta:
    """A view over a metadata map that turns each bad value into one clear InputError."""

    def __init__(self, raw: dict[builtins.str, builtins.str], source: builtins.str):
        self.raw = raw
        self.source = source

    def _err(self, key: builtins.str, msg: builtins.str) -> InputError:
        return InputError(f"{self.source}: metadata {NS}{key} {msg}")

    def has(self, key: builtins.str) -> bool:
        return NS + key in self.raw

    def str(self, key: builtins.str, default: builtins.str | None = None, required: bool = False) -> builtins.str | None:
        value = self.raw.get(NS + key)
        if value is None:
            if required:
                raise self._err(key, "is missing")
            return default
        return value

    def choice(self, key: builtins.str, choices: tuple[builtins.str, ...], default: builtins.str | None = None, required: bool = False):
        value = self.str(key, default, required)
        if value is not None and value not in choices:
            raise self._err(key, f"is {value!r}; expected one of {', '.join(choices)}")
        return value

    def int(self, key: builtins.str, default: builtins.int | None = None, required: bool = False, minimum: builtins.int | None = None,
            maximum: builtins.int | None = None):
        value = self.str(key, None, required)
        if value is None:
            return default
        try:
            out = int(value)
        except ValueError:
            raise self._err(key, f"is {value!r}, not an integer") from None
        if minimum is not None and out < minimum:
            raise self._err(key, f"is {out}; must be >= {minimum}")
        if maximum is not None and out > maximum:
            raise self._err(key, f"is {out}; above {maximum:,}, not a plausible value")
        return out

    def float(self, key: builtins.str, default: builtins.float | None = None, required: bool = False, positive: bool = False):
        value = self.str(key, None, required)
        if value is None:
            return default
        try:
            out = float(value)
        except ValueError:
            raise self._err(key, f"is {value!r}, not a number") from None
        if out != out or out in (float("inf"), float("-inf")):
            raise self._err(key, f"is {value!r}, not a finite number")
        if positive and out <= 0:
            raise self._err(key, f"is {out}; must be > 0")
        return out

    def json(self, key: builtins.str, default: Any = None, required: bool = False, kind: type | None = None):
        value = self.str(key, None, required)
        if value is None:
            return default
        try:
            out = json.loads(value)
        except json.JSONDecodeError as exc:
            raise self._err(key, f"is not valid JSON ({exc.msg})") from None
        if out is None and required:  # JSON null for a value that must be there (found by the fuzzer)
            raise self._err(key, "is null")
        if kind is not None and not isinstance(out, kind):
            raise self._err(key, f"must be a JSON {kind.__name__}")
        return out

    def floats(self, key: builtins.str, required: bool = False) -> tuple[builtins.float, ...] | None:
        value = self.json(key, required=required)
        if value is None:
            return None
        if isinstance(value, (int, float)):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, (int, float)) for v in value):
            raise self._err(key, "must be a number or a JSON list of numbers")
        return tuple(float(v) for v in value)

    def ints(self, key: builtins.str, required: bool = False) -> tuple[builtins.int, ...] | None:
        value = self.json(key, required=required)
        if value is None:
            return None
        if not isinstance(value, list) or not value or not all(isinstance(v, int) for v in value):
            raise self._err(key, "must be a JSON list of integers")
        return tuple(value)


def encode(values: dict[str, Any]) -> dict[str, str]:
    """``{key: value}`` -> ``{"fedaudit.key": str}``; dicts/lists become compact JSON, None is dropped."""
    out = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, (dict, list, tuple)):
            out[NS + key] = json.dumps(value, separators=(",", ":"))
        else:
            out[NS + key] = str(value)
    return out
