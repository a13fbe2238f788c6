"""The light method catalog: every registered label method, attack and defense with its summary and options, read
by the CLI without importing torch (``fedaudit --help`` and every ``--help`` stay fast; docs/cli.md).

The registries are the source: ``catalog.json`` beside this file is generated from them
(``python -m fedaudit.catalog``) and tests/test_startup.py fails when it differs from what the registries give, so
adding a method means registering it and regenerating the file, never touching the CLI. The implementation is
imported when a command runs (``Family.load``).
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("catalog.json")
TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}
# family -> (package whose import fills the registry, registry attribute)
FAMILIES = {"labels": ("fedaudit.labels", "LABEL_METHODS"), "attacks": ("fedaudit.attacks", "ATTACKS"),
            "defenses": ("fedaudit.defenses", "DEFENSES"), "text_attacks": ("fedaudit.attacks.text", "TEXT_ATTACKS")}


@dataclass(frozen=True)
class OptionInfo:
    """A method option as the CLI shows it (the same fields as fedaudit.methods.MethodOption, no validation)."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class MethodInfo:
    name: str
    summary: str
    paper: str
    options: tuple[OptionInfo, ...]
    defaults: dict[str, Any]  # an attack's loop settings by default (iterations, restarts, lr, ...); empty otherwise


@dataclass(frozen=True)
class Family:
    """One registry's entries, in registration order, and how to import the real classes."""

    name: str
    methods: tuple[MethodInfo, ...]
    loop_options: tuple[OptionInfo, ...] = ()

    def __iter__(self):
        return iter((m.name, m) for m in self.methods)

    def load(self, name: str):
        """The registered class ``name`` (imports the implementation)."""
        package, attr = FAMILIES[self.name]
        return getattr(importlib.import_module(package), attr).get(name)


def _option(o) -> dict:
    return {"name": o.name, "type": o.type.__name__, "default": o.default, "help": o.help,
            "choices": list(o.choices) if o.choices else None}


def build() -> dict:
    """The catalog as the registries give it (imports every implementation)."""
    from fedaudit.attacks.base import LOOP_OPTIONS

    out: dict[str, Any] = {}
    for family, (package, attr) in FAMILIES.items():
        registry = getattr(importlib.import_module(package), attr)
        out[family] = {"methods": [{"name": name, "summary": cls.summary, "paper": cls.paper,
                                    "options": [_option(o) for o in cls.options],
                                    "defaults": cls.loop_settings() if family == "attacks" else {}}
                                   for name, cls in registry]}
    out["attacks"]["loop_options"] = [_option(o) for o in LOOP_OPTIONS]
    return out


def _info(o: dict) -> OptionInfo:
    return OptionInfo(o["name"], TYPES[o["type"]], o["default"], o["help"], tuple(o["choices"]) if o["choices"] else None)


@functools.lru_cache(maxsize=None)
def family(name: str) -> Family:
    """One family from catalog.json (no torch import)."""
    data = json.loads(PATH.read_text())[name]
    methods = tuple(MethodInfo(m["name"], m["summary"], m["paper"], tuple(_info(o) for o in m["options"]), m["defaults"])
                    for m in data["methods"])
    return Family(name, methods, tuple(_info(o) for o in data.get("loop_options", ())))


def dumps(catalog: dict) -> str:
    return json.dumps(catalog, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m fedaudit.catalog``: regenerate catalog.json from the registries (``--check``: exit 1 if stale)."""
    argv = sys.argv[1:] if argv is None else argv
    text = dumps(build())
    if "--check" in argv:
        current = PATH.read_text() if PATH.exists() else ""
        if current != text:
            print(f"{PATH} is stale: run python -m fedaudit.catalog", file=sys.stderr)
            return 1
        return 0
    PATH.write_text(text)
    print(f"wrote {PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
