"""Reconstruction attacks, one module each, registered by name (``fedaudit reconstruct <attack>``)."""

from fedaudit.registry import Registry

ATTACKS: Registry = Registry("attack")

from fedaudit.attacks import dlg, fedleak, fedleak_dip, gradinversion, hfgi, ig, rgla  # noqa: E402,F401  (registration)
