"""The defense registry, in a module of its own: each defense module registers itself here (``@DEFENSES.register``) and
imports nothing from the package's ``__init__``, which imports every module once (the registration) without an
import cycle."""

from fedaudit.registry import Registry

DEFENSES: Registry = Registry("defense")
