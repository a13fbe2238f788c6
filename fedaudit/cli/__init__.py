"""The command-line interface: a thin layer over the registries and library functions."""
