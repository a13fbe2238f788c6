"""fedaudit: audit recorded federated-learning updates for gradient leakage."""

__version__ = "0.2.0"
