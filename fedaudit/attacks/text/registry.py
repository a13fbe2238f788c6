"""The text-attack registry (``fedaudit reconstruct <attack>`` on a language-model checkpoint), in a module of its own
like the image attacks' (``fedaudit/attacks/registry.py``): each module registers itself, nothing imports it back."""

from fedaudit.registry import Registry

TEXT_ATTACKS: Registry = Registry("text attack")
