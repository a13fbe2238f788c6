"""A name -> object registry shared by models, label methods, attacks and defenses.

Adding a method means registering it in its package; the CLI only looks names up here.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Generic, TypeVar

from fedaudit.errors import InputError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to entries; duplicate names are a programming error, unknown names an input error."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, entry: T) -> T:
        """Class decorator: ``@REGISTRY.register`` files the class under its ``name`` (written once, on the class)."""
        name = getattr(entry, "name", "")
        if not name:
            raise ValueError(f"{entry!r} has no name to register under")
        self.add(name, entry)
        return entry

    def add(self, name: str, entry: T) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._entries, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(sorted(self._entries)) or "none registered"
            raise InputError(f"unknown {self.kind} {name!r}{hint}; known: {known}") from None

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return iter(self._entries.items())

    def __len__(self) -> int:
        return len(self._entries)
