"""Gradient pruning (DLG's defense; Soteria/OUTPOST grid in FedLeak): zero the ``ratio`` smallest-magnitude
entries of each tensor (``--scope global``: of the whole gradient)."""

from __future__ import annotations

from fedaudit.defenses.base import Defense
from fedaudit.defenses.magnitude import keep_largest
from fedaudit.defenses.registry import DEFENSES
from fedaudit.errors import InputError
from fedaudit.methods import MethodOption


@DEFENSES.register
class Prune(Defense):
    name = "prune"
    summary = "zero the smallest-magnitude fraction of the gradient"
    paper = "Zhu et al. 2019 (DLG), gradient pruning"
    options = (
        MethodOption("ratio", float, 0.5, "fraction of entries set to zero"),
        MethodOption("scope", str, "per-tensor", "threshold per tensor or over the whole gradient", ("per-tensor", "global")),
    )

    def validate(self) -> None:
        if not 0 <= self.opts["ratio"] <= 1:
            raise InputError(f"prune: ratio must be in [0, 1], got {self.opts['ratio']}")

    def apply(self, tm, grads, session, batch):
        r = self.opts["ratio"]
        out, zeroed = keep_largest(grads, 1 - r, self.opts["scope"])
        self.info = {"zeroed_fraction": zeroed}
        return out
