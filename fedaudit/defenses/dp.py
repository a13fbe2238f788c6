"""Differential-privacy noise on the upload: clip the averaged gradient to L2 norm C, then add Gaussian or
Laplace noise of std ``sigma * C`` (sigma is the noise multiplier).

sigma is given directly (``--sigma``) or from (epsilon, delta):
* ``--formula gaussian`` (default): the Gaussian mechanism, sigma = sqrt(2 ln(1.25 / delta)) / epsilon
  (Dwork & Roth 2014, Thm. A.1; valid for epsilon < 1, used beyond it as the usual convention);
* ``--formula fedleak``: sigma = sqrt(2 ln(1 / delta)) / epsilon, as FedLeak's evaluation states it (no 1.25);
* Laplace noise: scale b = C / epsilon per entry (std sqrt(2) b), i.e. sigma = sqrt(2) / epsilon.
This is the upload-level mechanism (one clipped batch gradient, as FedLeak and Refiner apply DP to updates), not
DP-SGD's per-example clipping, which needs per-example gradients a recorded update no longer has.
"""

from __future__ import annotations

import math

import torch

from fedaudit.defenses.base import Defense, flat, unflat
from fedaudit.defenses.registry import DEFENSES
from fedaudit.errors import InputError
from fedaudit.methods import MethodOption


def noise_multiplier(epsilon: float, delta: float, formula: str, kind: str) -> float:
    if epsilon <= 0:
        raise InputError(f"dp: epsilon must be > 0, got {epsilon}")
    if kind == "laplace":
        return math.sqrt(2) / epsilon
    if not 0 < delta < 1:
        raise InputError(f"dp: delta must be in (0, 1), got {delta}")
    return math.sqrt(2 * math.log((1.25 if formula == "gaussian" else 1.0) / delta)) / epsilon


@DEFENSES.register
class DP(Defense):
    name = "dp"
    summary = "clip to L2 norm C, add Gaussian or Laplace noise (sigma direct or from epsilon, delta)"
    paper = "Abadi et al. 2016 (DP-SGD); FedLeak section 6.4 grid"
    options = (
        MethodOption("clip", float, 1.0, "C: L2 norm bound of the clipped gradient (0: no clipping, noise std sigma)"),
        MethodOption("sigma", float, 0.0, "noise multiplier (std = sigma * C); overrides eps/delta when > 0"),
        MethodOption("eps", float, 0.0, "epsilon (used when --sigma is 0)"),
        MethodOption("delta", float, 1e-5, "delta of the Gaussian mechanism"),
        MethodOption("noise", str, "gaussian", "noise law", ("gaussian", "laplace")),
        MethodOption("formula", str, "gaussian", "epsilon -> sigma: gaussian (ln 1.25/delta) or fedleak (ln 1/delta)", ("gaussian", "fedleak")),
    )

    def validate(self) -> None:
        o = self.opts
        if o["sigma"] < 0 or o["clip"] < 0:
            raise InputError(f"dp: sigma and clip must be >= 0, got sigma={o['sigma']}, clip={o['clip']}")
        if o["sigma"] == 0:
            if o["eps"] == 0:
                raise InputError("dp: give a noise level: sigma > 0, or eps > 0 (both are 0)")
            noise_multiplier(o["eps"], o["delta"], o["formula"], o["noise"])  # eps > 0, delta in (0, 1)

    def apply(self, tm, grads, session, batch):
        o = self.opts
        sigma = o["sigma"] if o["sigma"] > 0 else noise_multiplier(o["eps"], o["delta"], o["formula"], o["noise"])
        v = flat(grads).double()
        norm = float(v.norm())
        clip = o["clip"]
        if clip > 0 and norm > clip:
            v = v * (clip / norm)
        std = sigma * (clip if clip > 0 else 1.0)
        gen = torch.Generator().manual_seed(session.seed)
        if o["noise"] == "gaussian":
            noise = torch.randn(v.shape, generator=gen, dtype=torch.float64, device="cpu").to(v.device) * std
        else:  # Laplace(0, b) with std = sqrt(2) b, by inverse CDF of a seeded uniform
            u = torch.rand(v.shape, generator=gen, dtype=torch.float64, device="cpu").to(v.device) - 0.5
            noise = -(std / math.sqrt(2)) * u.sign() * torch.log1p(-2 * u.abs())
        self.info = {"noise_multiplier": sigma, "noise_std": std, "norm_before_clip": norm, "clipped": clip > 0 and norm > clip}
        return unflat((v + noise).float(), grads)
