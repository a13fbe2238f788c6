"""Train a feature-to-image inverter for one backbone on public images the reviewer supplies (RGLA step 3).

The backbone is the audited checkpoint with its output layer's input as the feature (exactly what RGLA recovers);
its weights stay fixed. Loss: pixel MSE, as FGLA's own training (RGLA's fine-tune adds piqa PSNR/SSIM/LPIPS
terms at lr 1e-8, which barely moves the weights; docs/methods/attacks.md, RGLA). Features are computed once,
for every image and, with ``flip``, its mirror image too. A held-out tenth of the images gives the validation
PSNR recorded in the file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedaudit.errors import TrainingInterrupted
from fedaudit.models.head import output_layer_io
from fedaudit.models.inverter import FeatureInverter, InverterConfig


@dataclass
class InverterTraining:
    epochs: int = 30
    batch_size: int = 32
    lr: float = 1e-3
    width: int = 32
    flip: bool = True
    bn_mode: str = "eval"
    seed: int = 0
    validation: float = 0.1


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = F.mse_loss(a, b).clamp_min(1e-10)
    return float(-10 * torch.log10(mse))


def train_inverter(model: nn.Module, spec, final_layer: str, images: torch.Tensor, cfg: InverterTraining,
                   on_epoch: Callable[[int, float], None] | None = None) -> tuple[FeatureInverter, dict]:
    """Returns the trained inverter (on the host) and what to record about the training. It trains on the backbone's
    device; the draws (the split, the orders, the initial weights) are made on the host, so a seed trains from the
    same start on every device. Ctrl-C raises TrainingInterrupted with the inverter trained so far and its record, so
    the caller can still save it."""
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    device = next(model.parameters()).device
    images = images.cpu()
    n = images.shape[0]
    perm = torch.randperm(n, generator=gen, device="cpu")
    n_val = int(round(cfg.validation * n)) if n >= 10 else 0
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    x_train = images[train_idx].to(device)
    if cfg.flip:
        x_train = torch.cat([x_train, x_train.flip(-1)])
    train_bn = cfg.bn_mode == "train"
    f_train = output_layer_io(model, spec, final_layer, x_train, train_bn, chunk=cfg.batch_size)[0].float()
    f_val = output_layer_io(model, spec, final_layer, images[val_idx], train_bn, chunk=cfg.batch_size)[0].float() if n_val else None
    # the features come back on the host (output_layer_io); the inverter trains beside the backbone
    f_train, f_val, x_val = f_train.to(device), None if f_val is None else f_val.to(device), images[val_idx].to(device)
    with torch.device("cpu"):  # the initial weights drawn on the host
        inverter = FeatureInverter(InverterConfig(f_train.shape[1], tuple(spec.input_shape), cfg.width))
    inverter.to(device)
    with torch.no_grad():
        inverter.feature_mean.copy_(f_train.mean(0))
        inverter.feature_std.copy_(f_train.std(0).clamp_min(1e-6) if f_train.shape[0] > 1 else torch.ones_like(f_train[0]))
    opt = torch.optim.Adam(inverter.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(cfg.epochs, 1))
    info = {"images": n, "train_images": int(x_train.shape[0]), "validation_images": n_val, "epochs_run": 0,
            "epochs": cfg.epochs, "batch_size": cfg.batch_size, "lr": cfg.lr, "width": cfg.width, "flip": cfg.flip,
            "bn_mode": cfg.bn_mode, "seed": cfg.seed, "loss": "mse", "train_mse": None, "validation_psnr": None}
    t0 = time.perf_counter()
    try:
        for epoch in range(cfg.epochs):
            inverter.train()
            order = torch.randperm(x_train.shape[0], generator=gen, device="cpu").to(device)
            total = 0.0
            for i in range(0, len(order), cfg.batch_size):
                idx = order[i:i + cfg.batch_size]
                if len(idx) < 2:  # BatchNorm needs two samples
                    continue
                opt.zero_grad()
                loss = F.mse_loss(inverter(f_train[idx]), x_train[idx])
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
            sched.step()
            mse = total / x_train.shape[0]
            info["epochs_run"], info["train_mse"] = epoch + 1, mse
            if on_epoch:
                on_epoch(epoch, mse)
    except KeyboardInterrupt:
        raise TrainingInterrupted(_finish(inverter, f_val, x_val, info, t0), info) from None
    return _finish(inverter, f_val, x_val, info, t0), info


def _finish(inverter, f_val, x_val, info, t0):
    inverter.eval()
    if f_val is not None and len(f_val):
        with torch.no_grad():
            info["validation_psnr"] = _psnr(inverter(f_val), x_val)
    info["seconds"] = round(time.perf_counter() - t0, 2)
    return inverter.cpu()  # written from the host
