"""The output layer's view of a batch: its input features h and its logits z, read with a forward hook.

The forward runs on copies of the buffers (train-mode BatchNorm updates land on the copies), so a checkpoint's
running statistics are never touched. Label methods, RGLA's inverter training and metrics all read features here.
Within ``shared_head_passes()`` a repeated pass (the same model, unchanged, and equal images) returns the earlier
result: ``labels auto`` runs several methods that each probe the head with the same aux images or dummies, and on a
large model each pass costs seconds.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

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


# per thread, the passes kept while shared_head_passes() is on: [(key, model ref, images, version, h, z)]
_LOCAL = threading.local()


@contextlib.contextmanager
def shared_head_passes():
    """Within the block, ``output_layer_io`` returns (copies of) an earlier pass's result where the model is the same
    object with the same parameters and buffers (each tensor's identity, storage and in-place version unchanged), the
    images are equal and every other argument matches. Passes that draw random numbers (a train-mode forward through
    dropout) or that a forward hook watches are never shared. Nested blocks share the outer one's passes; each
    thread has its own."""
    outer = getattr(_LOCAL, "passes", None)
    _LOCAL.passes = [] if outer is None else outer
    try:
        yield
    finally:
        _LOCAL.passes = outer


def draws_random(model: nn.Module, train: bool) -> bool:
    """Whether a forward in train mode (``train``) draws random numbers: dropout then masks at random, so two passes
    over the same images differ and their results must not be shared or kept."""
    return train and any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules())


def _hooked(model: nn.Module) -> bool:
    """Whether a forward hook watches the pass (gdbr reads a layer's output so): such a pass is never shared."""
    from torch.nn.modules import module as module_globals

    return bool(module_globals._global_forward_hooks or module_globals._global_forward_pre_hooks) \
        or any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def _state_stamp(model: nn.Module) -> tuple:
    return tuple((id(t), t.data_ptr(), t._version) for t in [*model.parameters(), *model.buffers()])


def output_layer_io(model: nn.Module, spec: ModelSpec, final_layer: str, images: torch.Tensor, train_bn: bool,
                    normalized: bool = False, chunk: int = CHUNK):
    """Input [N, M] and output [N, C] of the output layer ``final_layer`` for ``images``, in float64 on the CPU
    (where the label methods' algebra runs, beside the update's tensors, whatever device the model is on).
    In train-mode BN the statistics are those of each chunk (the whole batch when it fits one chunk)."""
    passes = getattr(_LOCAL, "passes", None)
    if passes is None or _hooked(model) or draws_random(model, train_bn):
        return _output_layer_io(model, spec, final_layer, images, train_bn, normalized, chunk)
    key = (final_layer, train_bn, normalized, chunk, spec, _state_stamp(model))
    for k, ref, kept, version, h, z in passes:
        if k == key and ref() is model and kept._version == version and kept.shape == images.shape \
                and kept.dtype == images.dtype and kept.device == images.device and torch.equal(kept, images):
            return h.clone(), z.clone()
    h, z = _output_layer_io(model, spec, final_layer, images, train_bn, normalized, chunk)
    passes.append((key, weakref.ref(model), images, images._version, h, z))
    return h.clone(), z.clone()


def _output_layer_io(model: nn.Module, spec: ModelSpec, final_layer: str, images: torch.Tensor, train_bn: bool,
                     normalized: bool, chunk: int):
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
    return torch.cat(hs).cpu(), torch.cat(zs).cpu()
