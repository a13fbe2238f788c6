"""The scan's check registry, in a module of its own (each check registers itself here: no import cycle)."""

from fedaudit.registry import Registry

CHECKS: Registry = Registry("scan check")
