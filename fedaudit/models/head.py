"""The output layer's view of a batch: its input features h and its logits z, read with a forward hook.

The forward runs on copies of the buffers (train-mode BatchNorm updates land on the copies), so a checkpoint's
running statistics are never touched. Label methods, RGLA's inverter training and metrics all read features here.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from fedaudit.models.normalize import normalize
from fedaudit.models.registry import ModelSpec

CHUNK = 256


def forward_detached(model: nn.Module, x: torch.Tensor, train: bool) -> None:
    """One forward pass in train or eval mode that changes nothing: no gradients, and train-mode BatchNorm updates
    land on copies of the buffers. What it shows comes out through forward hooks the caller registers."""
    state: dict[str, torch.Tensor] = dict(model.named_parameters())
    state.update({k: v.clone() for k, v in model.named_buffers()})  # BN updates land on the copies
    was = model.training
    try:
        model.train(train)
        with torch.no_grad():
            functional_call(model, state, (x,))
    finally:
        model.train(was)


def _forward_head(model: nn.Module, head: nn.Module, x: torch.Tensor, train: bool):
    captured: dict[str, torch.Tensor] = {}
    hook = head.register_forward_hook(lambda m, inp, out: captured.update(h=inp[0].detach(), z=out.detach()))
    try:
        forward_detached(model, x, train)
    finally:
        hook.remove()
    return captured["h"].flatten(1), captured["z"]


def output_layer_io(model: nn.Module, spec: ModelSpec, final_layer: str, images: torch.Tensor, train_bn: bool,
                    normalized: bool = False, chunk: int = CHUNK):
    """Input [N, M] and output [N, C] of the output layer ``final_layer`` for ``images``, in float64.
    In train-mode BN the statistics are those of each chunk (the whole batch when it fits one chunk)."""
    head = dict(model.named_modules())[final_layer]
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    dev = next(model.parameters()).device
    hs, zs = [], []
    for i in range(0, images.shape[0], chunk):
        x = images[i:i + chunk].to(dev)
        x = x if normalized else normalize(x, spec)
        if train_bn and x.shape[0] == 1 and has_bn:
            x = torch.cat([x, x])  # a BN layer in train mode needs 2 samples; the duplicate changes nothing
            h, z = _forward_head(model, head, x, train_bn)
            h, z = h[:1], z[:1]
        else:
            h, z = _forward_head(model, head, x, train_bn)
        hs.append(h.double())
        zs.append(z.double())
    return torch.cat(hs), torch.cat(zs)
