"""Label-recovery methods, one module each, registered by name (``fedaudit labels <method>``)."""

from fedaudit.registry import Registry

LABEL_METHODS: Registry = Registry("label method")

# registration (order = the order of ``fedaudit labels --help``)
from fedaudit.labels import (  # noqa: E402,F401
    idlg, yin, llg, llg_plus, zlg, ilrg, bias_count, fedleak, hfgi, gdbr, auto,
)
