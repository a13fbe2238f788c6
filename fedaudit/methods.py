"""Base for registered label methods, attacks and defenses: a name, what it needs, its options.

A method owns its options: ``options`` declares them (the CLI turns each into ``--name``), ``default_options()``
gives their defaults and ``parse_options()`` turns what a user gave (typed values or strings, from a flag or a
``name:opt=value`` spec) into a validated dict. Nothing else builds option dicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from fedaudit.errors import InputError, NotApplicable
from fedaudit.requirements import Requirement, unmet
from fedaudit.threat_model import ThreatModel


@dataclass(frozen=True)
class MethodOption:
    """A method-specific option; the CLI turns each into ``--name`` on that method's subcommand."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    positive: bool = False  # > 0 (a step size); every other numeric option only has to be >= 0
    maximum: float | None = None  # a bound on the work it asks for, or on a share (issue 88: 1e9 starts ran for ever)

    def convert(self, value: Any, owner: str) -> Any:
        """``value`` as this option's type (strings are parsed), checked against ``choices``."""
        if isinstance(value, str) and self.type is not str:
            value = _from_text(value, self.type, owner, self.name)
        elif self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif not isinstance(value, self.type):
            raise InputError(f"{owner!r}: {self.name}={value!r} is not a valid {self.type.__name__}")
        if self.type is float and not math.isfinite(value):
            raise InputError(f"{owner!r}: {self.name}={value!r} is not a finite number")
        # every numeric option of every method is a weight, a fraction, a radius or a count: none is negative
        if self.type in (int, float) and not isinstance(value, bool) and (value <= 0 if self.positive else value < 0):
            raise InputError(f"{owner!r}: --{self.name} must be {'>' if self.positive else '>='} 0, got {value}")
        if self.maximum is not None and not isinstance(value, bool) and value > self.maximum:
            raise InputError(f"{owner!r}: --{self.name} must be <= {self.maximum:g}, got {value}")
        if self.choices and value not in self.choices:
            raise InputError(f"{owner!r}: --{self.name} must be one of {', '.join(self.choices)}")
        return value


def _from_text(text: str, kind: type, owner: str, option: str) -> Any:
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        return kind(text)
    except ValueError:
        raise InputError(f"{owner!r}: {option}={text!r} is not a valid {kind.__name__}") from None


class Method:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    requires: ClassVar[tuple[Requirement, ...]] = ()
    options: ClassVar[tuple[MethodOption, ...]] = ()

    @classmethod
    def default_options(cls) -> dict[str, Any]:
        return {o.name: o.default for o in cls.options}

    @classmethod
    def parse_options(cls, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The defaults updated with ``given`` (option name -> value or text); unknown names are an input error."""
        by_name = {o.name: o for o in cls.options}
        out = cls.default_options()
        for key, value in (given or {}).items():
            if key not in by_name:
                raise InputError(f"{cls.name!r} has no option {key!r} (options: {', '.join(by_name) or 'none'})")
            out[key] = by_name[key].convert(value, cls.name)
        return out

    @classmethod
    def why_not(cls, tm: ThreatModel) -> list[str]:
        return unmet(cls.requires, tm)

    @classmethod
    def check_applicable(cls, tm: ThreatModel) -> None:
        reasons = cls.why_not(tm)
        if reasons:
            raise NotApplicable(f"{cls.name}: " + "; ".join(reasons))


def split_spec(spec: str, first_option: str | None = None) -> tuple[str, dict[str, str]]:
    """'name', 'name:value' (``first_option``'s value) or 'name:opt=value:opt=value' -> (name, {opt: text}),
    the one syntax of ``--defenses`` rows and ``--attack-options``."""
    name, *parts = spec.strip().split(":")
    given: dict[str, str] = {}
    for i, part in enumerate(parts):
        if "=" in part:
            key, value = part.split("=", 1)
        elif i == 0 and first_option:
            key, value = first_option, part
        else:
            raise InputError(f"{name!r}: {part!r} needs the form option=value")
        given[key] = value
    return name, given


def parse_spec(registry, spec: str) -> tuple[str, dict[str, Any]]:
    """A spec of a registered method -> (name, its full validated options)."""
    name = spec.strip().split(":")[0]
    cls = registry.get(name)
    _, given = split_spec(spec, cls.options[0].name if cls.options else None)
    return name, cls.parse_options(given)
