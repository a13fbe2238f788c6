"""Attacks on language-model updates, one module each, registered by name in ``registry.py``. Importing this package
imports every module once (the registration); it needs the ``text`` extra only when an attack runs."""

from fedaudit.attacks.text import dager, lamp, tag  # noqa: F401  (registration)
from fedaudit.attacks.text.registry import TEXT_ATTACKS

__all__ = ["TEXT_ATTACKS"]
