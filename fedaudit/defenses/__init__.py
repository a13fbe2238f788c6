"""Defenses a reviewer applies to an update before re-attacking it (``fedaudit defend <defense>``)."""

from fedaudit.registry import Registry

DEFENSES: Registry = Registry("defense")
