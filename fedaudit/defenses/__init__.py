"""Defenses a reviewer applies to an update before re-attacking it (``fedaudit defend <defense>``).

The registry lives in ``registry.py``; importing this package imports every defense module once, which registers it.
"""

from fedaudit.defenses import dp, prune, quantize, refiner, soteria, topk  # noqa: F401  (registration)
from fedaudit.defenses.registry import DEFENSES

__all__ = ["DEFENSES"]
