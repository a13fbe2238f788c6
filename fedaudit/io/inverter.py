"""The inverter file: a feature-to-image decoder (fedaudit/models/inverter.py) tied to one backbone's hash."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors, write_safetensors
from fedaudit.models.inverter import FeatureInverter, InverterConfig


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
