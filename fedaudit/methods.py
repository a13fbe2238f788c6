"""Base for registered label methods, attacks and defenses: a name, what it needs, and its source."""

from __future__ import annotations

from typing import ClassVar

from fedaudit.errors import NotApplicable
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
