"""Label-recovery methods, one module each, registered by name (``fedaudit labels <method>``)."""

from fedaudit.registry import Registry

LABEL_METHODS: Registry = Registry("label method")
