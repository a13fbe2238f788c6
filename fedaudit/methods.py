"""Base for registered label methods, attacks and defenses: a name, what it needs, and its source."""

from __future__ import annotations

from typing import Any, ClassVar

from fedaudit.errors import InputError, NotApplicable
from fedaudit.requirements import Requirement, unmet
from fedaudit.threat_model import ThreatModel


class Method:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    requires: ClassVar[tuple[Requirement, ...]] = ()

    @classmethod
    def why_not(cls, tm: ThreatModel) -> list[str]:
        return unmet(cls.requires, tm)

    @classmethod
    def check_applicable(cls, tm: ThreatModel) -> None:
        reasons = cls.why_not(tm)
        if reasons:
            raise NotApplicable(f"{cls.name}: " + "; ".join(reasons))


def _convert(text: str, kind, name: str, option: str):
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        return kind(text)
    except ValueError:
        raise InputError(f"{name!r}: {option}={text!r} is not a valid {kind.__name__}") from None


def parse_spec(registry, spec: str) -> tuple[str, dict[str, Any]]:
    """'name', 'name:value' (the first option) or 'name:opt=value:opt=value' -> (name, options with defaults),
    for ``--defenses`` and ``--attack-options`` rows."""
    parts = spec.strip().split(":")
    name = parts[0]
    cls = registry.get(name)
    options = {o.name: o.default for o in cls.options}
    by_name = {o.name: o for o in cls.options}
    for i, part in enumerate(parts[1:]):
        if "=" in part:
            key, value = part.split("=", 1)
        elif i == 0 and cls.options:
            key, value = cls.options[0].name, part
        else:
            raise InputError(f"{name!r}: {part!r} needs the form option=value")
        if key not in by_name:
            raise InputError(f"{name!r} has no option {key!r} (options: {', '.join(by_name) or 'none'})")
        options[key] = _convert(value, by_name[key].type, name, key)
        if by_name[key].choices and options[key] not in by_name[key].choices:
            raise InputError(f"{name!r}: {key} must be one of {', '.join(by_name[key].choices)}")
    return name, options
