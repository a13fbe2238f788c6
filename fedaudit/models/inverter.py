"""Feature-to-image generator ("inverter") for RGLA's last stage, and its safetensors file.

RGLA decodes recovered output-layer inputs with FGLA's generator (transposed-conv upsampling stages with residual
blocks, sigmoid output; shared/specs/rgla.md section 2, step 3). That one is sized for ResNet-50 at 224 px
(100 M parameters); this is the same design scaled to the audited model: a linear map from the (standardised)
feature vector to a base map of side ceil(H/8), three x2 upsampling stages (transposed conv 4x4/2, LeakyReLU,
one residual block of conv-BN-LeakyReLU-conv-BN), a 1x1 conv and a sigmoid, resized to H x W when H is not a
multiple of 8. It is tied to one backbone: the file records the checkpoint's hash and BN mode, and RGLA refuses
an inverter trained for other weights.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors, write_safetensors


@dataclass(frozen=True)
class InverterConfig:
    feature_dim: int
    image_shape: tuple[int, int, int]
    width: int = 32  # channels of the last stage; the stages have 4w, 2w, w


class _Residual(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.LeakyReLU(0.2),
                                  nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))

    def forward(self, x):
        return F.leaky_relu(x + self.body(x), 0.2)


class FeatureInverter(nn.Module):
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


def save_inverter(path: str | Path, inverter: FeatureInverter, backbone_sha256: str, bn_mode: str,
                  info: dict | None = None) -> Path:
    meta = {"fedaudit.file": "inverter", "fedaudit.inverter": json.dumps(asdict(inverter.cfg)),
            "fedaudit.backbone_sha256": backbone_sha256, "fedaudit.bn_mode": bn_mode,
            "fedaudit.training": json.dumps(info or {})}
    return write_safetensors(path, {k: v.detach().cpu().contiguous() for k, v in inverter.state_dict().items()}, meta)


def load_inverter(path: str | Path) -> tuple[FeatureInverter, dict[str, str]]:
    tensors, meta = read_safetensors(path, "inverter")
    if meta.get("fedaudit.file") != "inverter":
        raise InputError(f"{str(path)!r} is not an inverter (write one with 'fedaudit train-inverter')")
    try:
        raw = json.loads(meta["fedaudit.inverter"])
        cfg = InverterConfig(int(raw["feature_dim"]), tuple(int(v) for v in raw["image_shape"]), int(raw["width"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise InputError(f"inverter {str(path)!r} has malformed metadata: {exc}") from None
    inverter = FeatureInverter(cfg)
    try:
        inverter.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise InputError(f"inverter {str(path)!r} does not match its recorded configuration: {str(exc).splitlines()[0]}") from None
    return inverter.eval(), meta
