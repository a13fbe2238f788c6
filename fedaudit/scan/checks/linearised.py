"""A feature stack made to pass the image through unchanged before an imprint (breaching's "identity" handling of
the preceding layers): the first convolution a delta (Dirac) kernel, later convolutions zeroed, BatchNorm reset to
identity (weight 1, bias 0, running mean 0, variance 1). Alone, a BatchNorm at identity is what every model at
random initialisation has, and a zeroed tensor what zero-initialised heads and residual branches have: both are
"info"; a
delta convolution, or zeroed convolutions beside identity BatchNorms, is the construction."""

from __future__ import annotations

import torch

from fedaudit.scan.finding import Finding
from fedaudit.scan.registry import CHECKS
from fedaudit.scan.subject import Subject

DELTA_SHARE = 0.9  # kernels with one non-zero weight, of a convolution's kernels


def delta_share(w: torch.Tensor) -> float:
    """The share of a convolution's output channels whose kernels are all Dirac (one non-zero weight among >= 4: an
    input channel passed through, shifted at most) or zero, of its output channels that are not all zero."""
    k = w.reshape(w.shape[0] * w.shape[1], -1).abs()
    live = k.amax(1) > 0
    if k.shape[1] < 4 or not bool(live.any()):  # 1x1 kernels are all "one weight"
        return 0.0
    one = (k > 0).sum(1) == 1
    live_out = live.reshape(w.shape[0], w.shape[1]).any(1)  # zeroed output channels pass nothing: not counted
    per_out = (one | ~live).reshape(w.shape[0], w.shape[1]).all(1) & live_out
    return float(per_out.sum()) / float(live_out.sum())


def _bn_identity(t: dict[str, torch.Tensor], prefix: str) -> bool:
    want = {"weight": 1.0, "bias": 0.0, "running_mean": 0.0, "running_var": 1.0}
    return all(prefix + k in t and bool((t[prefix + k] == v).all()) for k, v in want.items())


class Linearised:
    name = "linearised-stack"
    statistic = "delta (Dirac) convolutions, zeroed weight tensors, BatchNorm at identity"

    def __call__(self, subject: Subject) -> list[Finding]:
        t = subject.tensors
        convs = [n for n, w in t.items() if w.ndim == 4 and n.endswith("weight")]
        deltas = [(n, delta_share(t[n])) for n in convs]
        deltas = [(n, s) for n, s in deltas if s >= DELTA_SHARE]
        zeroed = [n for n, w in t.items() if w.ndim >= 2 and n.endswith("weight") and w.numel() and not bool(w.any())]
        bns = [n[: -len("running_var")] for n in t if n.endswith("running_var")]
        identity = [p for p in bns if _bn_identity(t, p)]
        out = []
        built = bool(deltas) or (bool(zeroed) and bool(identity) and len(identity) == len(bns))
        for n, s in deltas:
            out.append(Finding(self.name, n, "share of output channels whose kernels are one-weight deltas", round(s, 4),
                               "no delta convolution among benign checkpoints measured", "high",
                               "a feature stack linearised before an imprint block (Robbing the Fed)",
                               "the image itself reaches the imprint layer: inputs recovered exactly",
                               "a Dirac kernel passes its input channel through unchanged"))
        if zeroed:
            out.append(Finding(self.name, zeroed[0], "weight tensors that are all zero", len(zeroed),
                               "torchvision's ViTs zero-initialise their head, some recipes their residual branches",
                               "high" if built else "info", "later layers zeroed so the stack passes the image on",
                               "with an imprint: inputs recovered exactly", ", ".join(zeroed[:8]), {"tensors": zeroed}))
        if identity and bns:
            out.append(Finding(self.name, identity[0] + "running_var", "BatchNorm layers at identity (weight 1, bias 0, "
                               "mean 0, var 1), of the model's BatchNorm layers", round(len(identity) / len(bns), 4),
                               "every BatchNorm of a model at random initialisation; none of a trained one",
                               "high" if built else "info", "BatchNorm reset to identity to linearise the stack",
                               "with an imprint: inputs recovered exactly",
                               f"{len(identity)} of {len(bns)} BatchNorm layers"))
        return out


CHECKS.register(Linearised())
