"""Reconstruction and label metrics, following published conventions (see each module)."""
