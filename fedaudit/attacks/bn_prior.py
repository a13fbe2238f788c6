"""The BatchNorm-statistic prior (DeepInversion's R_BN, GradInversion Eq. 10) and where its targets come from.

R_BN = sum over BN layers l of w_l (||mu_l(x') - mu*_l||_2 + ||var_l(x') - var*_l||_2), with mu_l and the biased
var_l taken over (batch, positions) of the layer's *input* in the dummy forward. The targets are

* ``recovered``: the client's batch statistics read from the update's BN buffers (fedaudit/channels/
  bn_statistics.py; exact for one local step, GradInversion's "BN_exact");
* ``running``: the checkpoint's running statistics (GradInversion's "BN_approx"; what HFGI uses);
* ``auto``: recovered when the update carries them, else running; ``off``: no prior.

Only ``recovered`` is refused when it cannot apply ("not applicable: ... no BN buffers in the update"); on a model
without BatchNorm the other modes leave the prior off and the report says why.

The checkpoint's running variance is PyTorch's unbiased running estimate; it is compared with the dummy's
biased variance as DeepInversion does (the difference is n/(n-1), under 1% for a layer with 100 values).
"""

from __future__ import annotations

from typing import Any

import torch

from fedaudit.channels import bn_statistics
from fedaudit.errors import NotApplicable
from fedaudit.methods import MethodOption
from fedaudit.threat_model import ThreatModel

MODES = ("auto", "recovered", "running", "off")
Targets = dict[str, tuple[torch.Tensor, torch.Tensor]]  # BN module name -> (mean, biased variance)


def bn_options(mode: str, weight: float) -> tuple[MethodOption, ...]:
    """The ``--bn-stats`` and ``--bn`` options an attack adds to take the prior."""
    return (
        MethodOption("bn-stats", str, mode, "BN-statistic prior targets: recovered from the update's BN buffers, the "
                     "checkpoint's running statistics, auto (recovered when present, else running) or off", MODES),
        MethodOption("bn", float, weight, "weight of the BN-statistic prior"),
    )


def resolve(tm: ThreatModel, mode: str, device: torch.device, who: str) -> tuple[Targets | None, dict[str, Any]]:
    """The targets for ``mode`` on ``device`` and what the report says about them."""
    layers = bn_statistics.bn_layers(tm.model)
    if mode == "off":
        return None, {"bn_stats": "off"}
    reason = bn_statistics.why_not(tm)
    if mode == "recovered" and reason:
        raise NotApplicable(f"{who}: --bn-stats recovered: {reason}")
    if not layers:  # running or auto on a model without BatchNorm: nothing to match, and the report says so
        return None, {"bn_stats": "off", "why": "the model has no BatchNorm layer with running statistics"}
    if mode == "recovered" or (mode == "auto" and reason is None):
        stats = bn_statistics.recover(tm)
        targets = {n: (s.mean.float().to(device), s.var.float().to(device)) for n, s in stats.layers.items()}
        return targets, {"bn_stats": "recovered", **stats.describe()}
    buffers = dict(tm.model.named_buffers())
    targets = {n: (buffers[f"{n}.running_mean"].detach().float().clone().to(device),
                   buffers[f"{n}.running_var"].detach().float().clone().to(device)) for n in layers}
    report: dict[str, Any] = {"bn_stats": "running", "layers": len(layers)}
    if mode == "auto" and reason:
        report["why_not_recovered"] = reason
    return targets, report


def bn_prior(captured: list[tuple[str, torch.Tensor]], targets: Targets, multipliers: tuple[float, ...] = ()) -> torch.Tensor:
    """R_BN over the BN inputs ``captured`` in forward order; the i-th captured layer is weighted by
    ``multipliers[i]`` (1 beyond them). Layers without a target are skipped."""
    terms = []
    for i, (name, inp) in enumerate(captured):
        target = targets.get(name)
        if target is None:
            continue
        dims = [0] + list(range(2, inp.ndim))
        mu, var = inp.mean(dims), inp.var(dims, unbiased=False)
        w = multipliers[i] if i < len(multipliers) else 1.0
        terms.append(w * ((mu - target[0]).norm() + (var - target[1]).norm()))
    if not terms:
        return torch.zeros((), device="cpu")  # a host scalar adds to a loss on any device
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total
