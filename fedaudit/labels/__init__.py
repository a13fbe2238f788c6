"""Label-recovery methods, one module each, registered by name (``fedaudit labels <method>``)."""

from fedaudit.registry import Registry

LABEL_METHODS: Registry = Registry("label method")

# registration (order = the order of ``fedaudit labels --help``)
from fedaudit.labels import (  # noqa: E402,F401
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
