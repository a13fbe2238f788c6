"""The BatchNorm-statistics channel: a FedAvg upload that carries BN buffers reveals every BN layer's batch
statistics (docs/methods/bn_statistics.md).

PyTorch's train-mode BatchNorm updates, per channel and per forward pass, ``running = (1 - m) running + m batch``
with the batch mean and the *unbiased* batch variance (n = B x H x W values per channel). So, from the global
buffers r_0 and the client's r_K after K local steps:

* K = 1: ``batch = (r_1 - (1 - m) r_0) / m``, exact (float precision; the /m amplifies the update's rounding).
* K > 1: ``sum_s w_s batch_s = (r_K - (1 - m)^K r_0) / (1 - (1 - m)^K)`` with ``w_s = m (1 - m)^(K - s) /
  (1 - (1 - m)^K)``: a momentum-weighted mixture of the K batches' statistics, later batches weighing more.
  Only that mixture is recoverable. For the variance it is the mixture of the per-batch variances, not the
  variance of the union of the batches (the spread between batch means is missing).
* ``momentum=None`` (cumulative average over ``num_batches_tracked`` T): ``(T_K r_K - T_0 r_0) / (T_K - T_0)``,
  the plain mean of the K batches' statistics; K is read from the buffers' ``num_batches_tracked``.

The momentum comes from the update's ``fedaudit.bn_momentum`` (``capture`` records it); without it, PyTorch's
default 0.1 is assumed and the result says so. The biased variance (what a BN layer normalises with, and what
the BN prior compares) is the unbiased one times (n - 1) / n.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from fedaudit.errors import NotApplicable
from fedaudit.threat_model import ThreatModel

DEFAULT_MOMENTUM = 0.1


@dataclass
class LayerStatistics:
    mean: torch.Tensor  # [C] float64
    var: torch.Tensor  # [C] biased (population) variance, what the layer normalised with
    var_unbiased: torch.Tensor  # [C]
    count: int  # values per channel in one batch (n = B x spatial positions)


@dataclass
class BNStatistics:
    layers: dict[str, LayerStatistics]  # BatchNorm module name -> recovered statistics, in forward order
    steps: int
    momentum: float | str
    momentum_source: str
    weights: list[float]  # each local batch's share in the recovered mixture (one entry, 1.0, when exact)
    notes: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.steps == 1

    def describe(self) -> dict[str, Any]:
        return {"available": True, "layers": len(self.layers), "exact": self.exact, "local_steps": self.steps,
                "momentum": self.momentum, "momentum_source": self.momentum_source,
                "mixture_weights": [round(w, 6) for w in self.weights],
                "what": "each BN layer's batch mean and biased variance" if self.exact else
                "a momentum-weighted mixture of the local batches' means and variances (not the union's variance)",
                "notes": self.notes}


def bn_layers(model: nn.Module) -> list[str]:
    """Names of the BatchNorm layers that keep running statistics, in module order."""
    return [n for n, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats and m.running_mean is not None]


def why_not(tm: ThreatModel) -> str | None:
    """None when the update carries every BN layer's buffers and they moved; else the reason."""
    layers = bn_layers(tm.model)
    if not layers:
        return "the model has no BatchNorm layer with running statistics"
    missing = [n for n in layers if f"{n}.running_mean" not in tm.client_buffers or f"{n}.running_var" not in tm.client_buffers]
    if len(missing) == len(layers):
        return "no BN buffers in the update"
    if missing:
        return f"the update lacks the BN buffers of {missing[0]}" + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else "")
    if tm.meta.bn_mode == "eval":
        return "the client trained with BatchNorm in eval mode, so its running statistics did not move"
    buffers = dict(tm.model.named_buffers())
    if all(torch.equal(tm.client_buffers[f"{n}.running_mean"].to(buffers[f"{n}.running_mean"]), buffers[f"{n}.running_mean"])
           for n in layers):
        return "the update's BN buffers equal the checkpoint's: the client's statistics did not move"
    return None


def _counts(tm: ThreatModel, layers: list[str]) -> dict[str, int]:
    """Values per channel in one of the client's batches, for each BN layer (a dry forward at batch 1)."""
    modules = dict(tm.model.named_modules())
    shapes: dict[str, tuple[int, ...]] = {}
    hooks = [modules[n].register_forward_hook(lambda m, i, o, n=n: shapes.__setitem__(n, tuple(i[0].shape)))
             for n in layers]
    was = tm.model.training
    dev = tm.device
    try:
        tm.model.eval()
        with torch.no_grad():
            tm.model(torch.zeros(1, *tm.spec.input_shape, device=dev))
    finally:
        tm.model.train(was)
        for h in hooks:
            h.remove()
    batch = tm.batch_size or 1
    out = {}
    for n in layers:
        spatial = 1
        for s in shapes[n][2:]:
            spatial *= s
        out[n] = batch * spatial
    return out


def _momentum(tm: ThreatModel) -> tuple[float | str, str]:
    m = tm.meta.bn_momentum
    if m is not None:
        return m, "update metadata (fedaudit.bn_momentum)"
    return DEFAULT_MOMENTUM, f"assumed: PyTorch's default {DEFAULT_MOMENTUM} (the update does not record fedaudit.bn_momentum)"


def recover(tm: ThreatModel) -> BNStatistics:
    """Every BN layer's batch statistics (K = 1) or their momentum-weighted mixture (K > 1)."""
    reason = why_not(tm)
    if reason:
        raise NotApplicable(reason)
    layers = bn_layers(tm.model)
    buffers = dict(tm.model.named_buffers())
    momentum, source = _momentum(tm)
    counts = _counts(tm, layers)
    notes: list[str] = []
    tracked = f"{layers[0]}.num_batches_tracked"
    t0 = int(buffers[tracked]) if tracked in buffers else None
    tk = int(tm.client_buffers[tracked]) if tracked in tm.client_buffers else None
    steps = tm.meta.local_steps
    if t0 is not None and tk is not None and tk - t0 != steps:
        notes.append(f"num_batches_tracked moved by {tk - t0}, the update records {steps} local steps: using {tk - t0}")
        steps = tk - t0
    if steps < 1:
        raise NotApplicable("the BN buffers record no local step (num_batches_tracked did not move)")
    out: dict[str, LayerStatistics] = {}
    if momentum == "cumulative":
        if t0 is None or tk is None:
            raise NotApplicable("cumulative BatchNorm (momentum=None) needs num_batches_tracked in the update")
        a, b, weights = tk / steps, t0 / steps, [1.0 / steps] * steps  # batch = a r_K - b r_0
        source = "cumulative average (momentum=None), solved from num_batches_tracked"
    else:
        m = float(momentum)
        keep = (1 - m) ** steps
        a, b = 1 / (1 - keep), keep / (1 - keep)  # K = 1: 1/m and (1 - m)/m
        weights = [m * (1 - m) ** (steps - s) / (1 - keep) for s in range(1, steps + 1)]
    for n in layers:
        r0m, r0v = buffers[f"{n}.running_mean"].double(), buffers[f"{n}.running_var"].double()
        rkm = tm.client_buffers[f"{n}.running_mean"].to(r0m)
        rkv = tm.client_buffers[f"{n}.running_var"].to(r0v)
        mean = a * rkm - b * r0m
        var_u = a * rkv - b * r0v
        count = counts[n]
        var = var_u * (count - 1) / count if count > 1 else var_u
        out[n] = LayerStatistics(mean, var.clamp_min(0), var_u.clamp_min(0), count)
    if steps > 1:
        notes.append("K > 1: the statistics are a mixture over the local batches; the variance mixture lacks the spread "
                     "between batch means")
    return BNStatistics(out, steps, cast(float | str, momentum), source, weights, notes)


def availability(tm: ThreatModel) -> dict[str, Any]:
    """What ``inspect`` and reports say about the channel, recovering nothing."""
    reason = why_not(tm)
    if reason:
        return {"available": False, "why_not": reason}
    momentum, source = _momentum(tm)
    return {"available": True, "exact": tm.meta.local_steps == 1, "local_steps": tm.meta.local_steps,
            "momentum": momentum, "momentum_source": source, "layers": len(bn_layers(tm.model))}
