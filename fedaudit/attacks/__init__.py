"""Reconstruction attacks, one module each, registered by name (``fedaudit reconstruct <attack>``).

The registry lives in ``registry.py``; importing this package imports every attack module once, which registers it.
"""

from fedaudit.attacks import april, dlg, fedleak, fedleak_dip, gradinversion, hfgi, ig, imprint, rgla  # noqa: F401  (registration)
from fedaudit.attacks.registry import ATTACKS

__all__ = ["ATTACKS"]
