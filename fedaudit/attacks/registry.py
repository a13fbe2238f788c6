"""The attack registry, in a module of its own: each attack module registers itself here (``@ATTACKS.register``) and
imports nothing from the package's ``__init__``, which imports every module once (the registration) without an
import cycle."""

from fedaudit.registry import Registry

ATTACKS: Registry = Registry("attack")
