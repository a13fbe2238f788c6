"""The label method registry, in a module of its own: each label method module registers itself here (``@LABEL_METHODS.register``) and
imports nothing from the package's ``__init__``, which imports every module once (the registration) without an
import cycle."""

from fedaudit.registry import Registry

LABEL_METHODS: Registry = Registry("label method")
