"""Feature-to-image generator ("inverter") for RGLA's last stage.

RGLA decodes recovered output-layer inputs with FGLA's generator (transposed-conv upsampling stages with residual
blocks, sigmoid output; docs/methods/attacks.md, RGLA). That one is sized for ResNet-50 at 224 px
(100 M parameters); this is the same design scaled to the audited model: a linear map from the (standardised)
feature vector to a base map of side ceil(H/8), three x2 upsampling stages (transposed conv 4x4/2, LeakyReLU,
one residual block of conv-BN-LeakyReLU-conv-BN), a 1x1 conv and a sigmoid, resized to H x W when H is not a
multiple of 8. It is tied to one backbone: its file (fedaudit/io/inverter.py) records the checkpoint's hash and BN
mode, and RGLA refuses an inverter trained for other weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class InverterConfig:
    feature_dim: int
    image_shape: tuple[int, ...]
    width: int = 32  # channels of the last stage; the stages have 4w, 2w, w


class _Residual(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.LeakyReLU(0.2),
                                  nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))

    def forward(self, x):
        return F.leaky_relu(x + self.body(x), 0.2)


class FeatureInverter(nn.Module):
    feature_mean: torch.Tensor
    feature_std: torch.Tensor

    def __init__(self, cfg: InverterConfig):
        super().__init__()
        self.cfg = cfg
        c, h, w = cfg.image_shape
        self.side = max(1, math.ceil(max(h, w) / 8))
        chans = [4 * cfg.width, 4 * cfg.width, 2 * cfg.width, cfg.width]
        self.register_buffer("feature_mean", torch.zeros(cfg.feature_dim))
        self.register_buffer("feature_std", torch.ones(cfg.feature_dim))
        self.project = nn.Linear(cfg.feature_dim, chans[0] * self.side * self.side)
        stages = []
        for cin, cout in zip(chans[:-1], chans[1:]):
            stages += [nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1), nn.LeakyReLU(0.2), _Residual(cout)]
        self.stages = nn.Sequential(*stages)
        self.to_image = nn.Conv2d(chans[-1], c, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        z = (features - self.feature_mean) / self.feature_std
        x = self.project(z).view(-1, 4 * self.cfg.width, self.side, self.side)
        x = torch.sigmoid(self.to_image(self.stages(F.leaky_relu(x, 0.2))))
        _, h, w = self.cfg.image_shape
        return x if x.shape[-2:] == (h, w) else F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)
