"""Every scan check, imported once so that each registers itself (fedaudit/scan/registry.py)."""

from fedaudit.scan.checks import (  # noqa: F401
    bias_ladder,
    classifier_scale,
    declared_arch,
    disaggregation_snr,
    duplicate_rows,
    linearised,
    transmit_snr,
    trap_rows,
)
