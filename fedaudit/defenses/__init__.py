"""Defenses a reviewer applies to an update before re-attacking it (``fedaudit defend <defense>``)."""

from fedaudit.registry import Registry

DEFENSES: Registry = Registry("defense")

from fedaudit.defenses import dp, prune, quantize, refiner, soteria, topk  # noqa: E402,F401  (registration)
