"""Bridges to FL frameworks: what a real server receives, recorded as fedaudit files (optional extras)."""
