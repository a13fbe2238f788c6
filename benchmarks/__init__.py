"""Benchmarks, run on demand from the repository root: ``python -m benchmarks.<name> --help``."""
