"""Label-recovery methods, one module each, registered by name (``fedaudit labels <method>``).

The registry lives in ``registry.py``; importing this package imports every method module once, which registers it
(order = the order of ``fedaudit labels --help``).
"""

from fedaudit.labels import (  # noqa: F401  (registration)
    auto,
    bias_count,
    bn_count,
    client_fit,
    fedleak,
    gdbr,
    hfgi,
    hidden_split,
    idlg,
    ilrg,
    llg,
    llg_plus,
    rlu,
    sample_split,
    yin,
    zlg,
)
from fedaudit.labels.registry import LABEL_METHODS

__all__ = ["LABEL_METHODS"]
