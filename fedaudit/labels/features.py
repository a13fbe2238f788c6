"""The output layer's view of auxiliary inputs: its input features h and the softmax p.

Label methods model the captured gradient G = mean_n (p_n - y_n) h_n^T through these statistics. The forward
runs in the BatchNorm mode the update records (eval when unknown) on copies of the buffers, so the
checkpoint's running statistics are never touched.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from fedaudit.labels.base import Aux, LabelContext
from fedaudit.models.normalize import normalize
from fedaudit.threat_model import ThreatModel

CHUNK = 256


def _forward_head(model: nn.Module, head: nn.Module, x: torch.Tensor, train: bool):
    captured = {}
    hook = head.register_forward_hook(lambda m, inp, out: captured.update(h=inp[0].detach(), z=out.detach()))
    state = {k: v for k, v in model.named_parameters()}
    state.update({k: v.clone() for k, v in model.named_buffers()})  # BN updates land on the copies
    was = model.training
    try:
        model.train(train)
        with torch.no_grad():
            functional_call(model, state, (x,))
    finally:
        model.train(was)
        hook.remove()
    return captured["h"].flatten(1), captured["z"]


def head_stats(tm: ThreatModel, images: torch.Tensor, normalized: bool = False, chunk: int = CHUNK):
    """Features into the output layer [N, M] and softmax outputs [N, C] of ``images``."""
    h, z = output_layer_io(tm.model, tm.spec, tm.final_layer, images, tm.meta.bn_mode == "train", normalized, chunk)
    return h, torch.softmax(z, dim=1)


def output_layer_io(model: nn.Module, spec, final_layer: str, images: torch.Tensor, train_bn: bool,
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


def aux_stats(tm: ThreatModel, ctx: LabelContext):
    """Head statistics of the context's aux images or dummies."""
    return head_stats(tm, ctx.aux.images, normalized=ctx.aux.normalized)


def dummy_aux(tm: ThreatModel, n: int, seed: int) -> Aux:
    """N(0,1) inputs in the network's (normalised) input space, labelled round-robin by class."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *tm.spec.input_shape, generator=g)
    return Aux(x, torch.arange(n) % tm.spec.num_classes, "dummy", normalized=True)


def output_weight_grad_rowsums(tm: ThreatModel) -> torch.Tensor:
    """g_i = sum_m G[i, m] in float64."""
    return tm.final_weight_grad.double().flatten(1).sum(1)
