"""Truth-free evidence from exact channels of the update: what an attacker recovers without optimising.

* **Analytic input through a linear first layer** (the first parameterised module is an ``nn.Linear`` taking
  the flattened input, with weight and bias gradients in the update): dW = sum_n delta_n x_n^T and
  db = sum_n delta_n, so each output row i gives x_i = dW_i / db_i. With one sample every row gives the same
  input exactly (the image leaks in closed form); with several, the rows are mixtures and disagree. The
  *dispersion* (median relative distance of the rows' x_i from the row of largest |db|) tells the two apart
  without the truth: below 1e-3 the recovery is exact.
* **BN batch statistics**: whether the update carries them (fedaudit/channels/bn_statistics.py).
* **RGLA's residuals**: the attack's own exactness diagnostics when it ran (its conditioning and warnings).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from fedaudit.channels import bn_statistics
from fedaudit.threat_model import ThreatModel

EXACT_DISPERSION = 1e-3


def first_linear(tm: ThreatModel) -> str | None:
    """The name of the first parameterised module when it is a Linear layer on the flattened input."""
    size = math.prod(tm.spec.input_shape)
    for name, module in tm.model.named_modules():
        if any(True for _ in module.parameters(recurse=False)):
            return name if isinstance(module, nn.Linear) and module.in_features == size else None
    return None


def analytic_input(tm: ThreatModel) -> dict[str, Any]:
    """Whether the input leaks in closed form through a linear first layer, and how exactly."""
    name = first_linear(tm)
    if name is None:
        return {"applies": False, "why_not": "the first layer is not a linear layer on the flattened input"}
    dw, db = tm.grad(f"{name}.weight"), tm.grad(f"{name}.bias")
    if dw is None or db is None:
        return {"applies": False, "why_not": f"the update lacks {name}'s weight or bias gradient"}
    dw, db = dw.double().cpu(), db.double().cpu()
    rows = torch.nonzero(db.abs() > 1e-6 * db.abs().max().clamp_min(1e-300)).flatten()
    if len(rows) < 2:
        return {"applies": False, "why_not": "fewer than two rows with a non-zero bias gradient"}
    x = dw[rows] / db[rows, None]
    ref = x[int(db[rows].abs().argmax())]
    dispersion = float(((x - ref).norm(dim=1) / ref.norm().clamp_min(1e-300)).median())
    exact = dispersion < EXACT_DISPERSION
    return {"applies": True, "layer": name, "rows": int(len(rows)), "dispersion": dispersion, "exact": exact,
            "meaning": "every row gives the same input: the image is recovered exactly in closed form" if exact else
            "the rows disagree (several samples mixed): no closed-form image"}


def channel_evidence(tm: ThreatModel, recovered: dict[str, Any] | None = None) -> dict[str, Any]:
    """The exact channels of ``tm``; ``recovered`` is what the attack's exact path recovered (its report section)."""
    out: dict[str, Any] = {"analytic_input": analytic_input(tm), "bn_statistics": bn_statistics.availability(tm)}
    if isinstance(recovered, dict) and "conditioning" in recovered:
        out["rgla"] = {k: recovered.get(k) for k in ("conditioning", "warnings", "analytic_chain", "stage")}
    return out
