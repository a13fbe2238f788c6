"""Refiner's privacy metric: a noise-proportion regressor D (Refiner, section 3.3 and Appendix D).

D(x) ~ 0 for natural images and ~ 1 for uniform noise. Architecture (App. D): three Conv 3x3 / stride 2 /
pad 1 layers with w, 2w, 4w channels (the paper: w = 128) and ReLU, flatten, Linear -> 1, sigmoid. Training:
each batch of public images t1 is mixed with uniform noise t2 at the 11 ratios r = 0, 0.1, ..., 1.0 (the
paper's grid; its text also says r ~ U(0, 1)), target r, Adam lr 1e-4. The loss is not stated: MSE here.
The file records the calibration on held-out images (mean D per ratio), to compare with the paper's Fig. 5
(CIFAR-10: 0.078, 0.175, 0.273, 0.397, 0.494, 0.617, 0.700, 0.821, 0.910 for r = 0.1 ... 0.9).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedaudit.errors import InputError, TrainingInterrupted
from fedaudit.io.files import read_safetensors, write_safetensors

RATIOS = tuple(i / 10 for i in range(11))


class NoiseCritic(nn.Module):
    def __init__(self, image_shape: tuple[int, ...], width: int = 128):
        super().__init__()
        c, h, w = image_shape
        self.image_shape, self.width = tuple(image_shape), width
        self.features = nn.Sequential(nn.Conv2d(c, width, 3, 2, 1), nn.ReLU(), nn.Conv2d(width, 2 * width, 3, 2, 1), nn.ReLU(),
                                      nn.Conv2d(2 * width, 4 * width, 3, 2, 1), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            n = self.features(torch.zeros(1, c, h, w, device=next(self.features.parameters()).device)).shape[1]
        self.head = nn.Linear(n, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.head(self.features(x))).squeeze(1)


@dataclass
class CriticTraining:
    epochs: int = 20
    batch_size: int = 128
    lr: float = 1e-4
    width: int = 128
    seed: int = 0
    validation: float = 0.1


def mix(images: torch.Tensor, ratio: float, gen: torch.Generator) -> torch.Tensor:
    """``images`` mixed with uniform noise at ``ratio``; the noise drawn on the host by ``gen`` (the same on every
    device), then moved to the images'."""
    noise = torch.rand(images.shape, generator=gen, device="cpu")
    return (1 - ratio) * images + ratio * noise.to(images.device)


def calibration(critic: NoiseCritic, images: torch.Tensor, seed: int = 1) -> dict[str, float]:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        return {f"{r:.1f}": float(critic(mix(images, r, gen)).mean()) for r in RATIOS}


def train_critic(images: torch.Tensor, cfg: CriticTraining, on_epoch: Callable[[int, float], None] | None = None,
                 device: torch.device | str = "cpu"):
    """Train D on ``device``; the draws (splits, orders, noise, the initial weights) are made on the host, so a seed
    trains from the same start on every device. Returns the critic on the host and what to record."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    perm = torch.randperm(images.shape[0], generator=gen, device="cpu")
    n_val = int(round(cfg.validation * len(perm))) if len(perm) >= 10 else 0
    images = images.cpu()
    val, train = images[perm[:n_val]].to(device), images[perm[n_val:]].to(device)
    with torch.device("cpu"):  # the initial weights drawn on the host
        critic = NoiseCritic(tuple(images.shape[1:]), cfg.width)
    critic.to(device)
    opt = torch.optim.Adam(critic.parameters(), lr=cfg.lr)
    info = {"images": int(images.shape[0]), "epochs": cfg.epochs, "epochs_run": 0, "batch_size": cfg.batch_size,
            "lr": cfg.lr, "width": cfg.width, "seed": cfg.seed, "loss": "mse", "ratios": list(RATIOS)}
    t0 = time.perf_counter()
    try:
        for epoch in range(cfg.epochs):
            critic.train()
            order = torch.randperm(len(train), generator=gen, device="cpu").to(train.device)
            total, count = 0.0, 0
            for i in range(0, len(order), cfg.batch_size):
                batch = train[order[i:i + cfg.batch_size]]
                x = torch.cat([mix(batch, r, gen) for r in RATIOS])
                target = torch.cat([torch.full((len(batch),), r, device=batch.device) for r in RATIOS])
                opt.zero_grad()
                loss = F.mse_loss(critic(x), target)
                loss.backward()
                opt.step()
                total, count = total + float(loss.detach()) * len(x), count + len(x)
            mse = total / max(count, 1)
            info["epochs_run"], info["train_mse"] = epoch + 1, mse
            if on_epoch:
                on_epoch(epoch, mse)
    except KeyboardInterrupt:
        raise TrainingInterrupted(_finish(critic, val, info, t0), info) from None
    return _finish(critic, val, info, t0), info


def _finish(critic, val, info, t0):
    critic.eval()
    if len(val):
        info["calibration"] = calibration(critic, val)
    info["seconds"] = round(time.perf_counter() - t0, 2)
    return critic.cpu()  # written from the host


def save_critic(path, critic: NoiseCritic, info: dict) -> None:
    meta = {"fedaudit.file": "refiner_critic", "fedaudit.critic": json.dumps({"image_shape": critic.image_shape, "width": critic.width}),
            "fedaudit.training": json.dumps(info)}
    write_safetensors(path, {k: v.detach().contiguous() for k, v in critic.state_dict().items()}, meta)


def load_critic(path) -> NoiseCritic:
    tensors, meta = read_safetensors(path, "critic")
    if meta.get("fedaudit.file") != "refiner_critic":
        raise InputError(f"{str(path)!r} is not a Refiner critic (write one with 'fedaudit train-refiner-critic')")
    try:
        cfg = json.loads(meta["fedaudit.critic"])
        critic = NoiseCritic(tuple(int(v) for v in cfg["image_shape"]), int(cfg["width"]))
        critic.load_state_dict(tensors, strict=True)
    except (KeyError, ValueError, TypeError, RuntimeError) as exc:
        raise InputError(f"critic {str(path)!r} is malformed: {str(exc).splitlines()[0]}") from None
    return critic.eval()
