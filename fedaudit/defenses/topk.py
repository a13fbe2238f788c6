"""Top-k sparsification (communication compression used as a defense): upload only the ``keep`` fraction of
largest-magnitude entries over the whole gradient (``--scope per-tensor`` to keep per tensor). One round, so
there is no error-feedback residual to carry."""

from __future__ import annotations

from fedaudit.defenses.base import Defense
from fedaudit.defenses.magnitude import keep_largest
from fedaudit.defenses.registry import DEFENSES
from fedaudit.errors import InputError
from fedaudit.methods import MethodOption


@DEFENSES.register
class TopK(Defense):
    name = "topk-sparsify"
    summary = "upload only the largest-magnitude fraction of the gradient"
    paper = "Aji & Heafield 2017; Lin et al. 2018 (top-k sparsification)"
    options = (
        MethodOption("keep", float, 0.1, "fraction of entries uploaded"),
        MethodOption("scope", str, "global", "top-k over the whole gradient or per tensor", ("global", "per-tensor")),
    )

    def validate(self) -> None:
        if not 0 <= self.opts["keep"] <= 1:
            raise InputError(f"topk-sparsify: keep must be in [0, 1], got {self.opts['keep']}")

    def apply(self, tm, grads, session, batch):
        keep = self.opts["keep"]
        out, zeroed = keep_largest(grads, keep, self.opts["scope"])
        self.info = {"zeroed_fraction": zeroed}
        return out
