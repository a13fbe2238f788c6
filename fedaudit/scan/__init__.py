"""Is this checkpoint built to leak? Statistics of a global model's weights that malicious-server constructions
(imprint, trap weights, linearised stacks, fishing, malicious transformers) leave behind, read before any client
trains on it (``fedaudit scan``; docs/scan.md). Each check is one module in ``checks/``, registered in
``registry.py``; ``run.py`` reads a checkpoint and runs them all."""

from fedaudit.scan import checks as _checks  # noqa: F401  (registers every check)
from fedaudit.scan.finding import SEVERITIES, Finding
from fedaudit.scan.registry import CHECKS

__all__ = ["CHECKS", "SEVERITIES", "Finding"]
