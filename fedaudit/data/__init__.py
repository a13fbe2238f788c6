"""Small real image sets that installed packages ship (no downloads): for samples, tests and benchmarks."""
