"""A model built to leak: Robbing the Fed's imprint block (Fowl et al., ICLR 2022) in front of a registered
architecture. For audits and tests of the server's powers (``fedaudit scan``, ``reconstruct imprint``; docs/scan.md):
what a dishonest server ships, written from the paper, so that an update recorded through it can be attacked and the
checkpoint scanned. Never a model to train.

The block (paper, section 3): ``linear0`` maps the flattened (normalised) image to ``bins`` units whose rows are all
the same query q and whose biases are -t_i, the thresholds t_i the (i / bins)-quantiles of a Normal(mu, sigma) fitted
to q . x over the data; a ReLU; ``linear1`` (every weight 1 / bins: the units' mean, so a sigmoid base does not saturate) maps the units
back to the image's shape for the base model.
Every unit i fires for the images with q . x > t_i, and all receive the same upstream gradient per image, so the
gradients of units i and i + 1 differ by the images whose projection falls between t_i and t_{i+1}: one image there
is recovered exactly (fedaudit/attacks/imprint.py).

``query``: "randn" (a Gaussian vector scaled so that q . x has unit variance for unit-variance pixels) or "mean"
(1/N: the image's mean). ``mu``/``sigma``: the projection's distribution the server fitted (defaults 0, 1).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import torch
from torch import nn

from fedaudit.models.registry import MODELS, register_model


class ImprintBlock(nn.Module):
    def __init__(self, input_shape, bins: int = 64, query: str = "randn", mu: float = 0.0, sigma: float = 1.0,
                 seed: int = 0):
        super().__init__()
        if bins < 2:
            raise ValueError(f"bins must be >= 2, got {bins}")
        if sigma <= 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        self.input_shape = tuple(input_shape)
        n = math.prod(self.input_shape)
        self.linear0 = nn.Linear(n, bins)
        self.linear1 = nn.Linear(bins, n)
        if query == "randn":
            q = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
            q = (q - q.mean()) / q.std() / math.sqrt(n)
        elif query == "mean":
            q = torch.full((n,), 1.0 / n, dtype=torch.float64)
        else:
            raise ValueError(f"query must be 'randn' or 'mean', got {query!r}")
        # the lowest bin fires for every image (the paper's -inf, a finite stand-in); the others at Normal quantiles
        t = [mu - 10 * sigma] + [NormalDist(mu, sigma).inv_cdf(i / bins) for i in range(1, bins)]
        with torch.no_grad():
            self.linear0.weight.copy_(q.float().expand(bins, n))
            self.linear0.bias.copy_(-torch.tensor(t))
            self.linear1.weight.fill_(1.0 / bins)  # every unit the same weight: the same upstream gradient
            self.linear1.bias.zero_()

    def forward(self, x):
        h = torch.relu(self.linear0(x.flatten(1)))
        return self.linear1(h).reshape(x.shape[0], *self.input_shape)


class ImprintModel(nn.Module):
    def __init__(self, block: ImprintBlock, base: nn.Module):
        super().__init__()
        self.imprint = block
        self.base = base

    def forward(self, x):
        return self.base(self.imprint(x))


@register_model("imprint", "a model built to leak: Robbing the Fed's imprint block before a registered base "
                "(kwargs: base, bins, query, mu, sigma, seed); for audits of the server's powers",
                paper="Fowl et al. 2022, Robbing the Fed (ICLR)")
def imprint(num_classes, input_shape, base: str = "lenet", bins: int = 64, query: str = "randn", mu: float = 0.0,
            sigma: float = 1.0, seed: int = 0, base_kwargs: dict | None = None):
    if base == "imprint" or base not in MODELS:
        raise ValueError(f"base must be a registered architecture other than imprint, got {base!r}")
    block = ImprintBlock(input_shape, bins, query, mu, sigma, seed)
    return ImprintModel(block, MODELS.get(base).factory(num_classes, tuple(input_shape), **(base_kwargs or {})))
