"""Record what a client would upload from a batch of images.

FedSGD: the gradient of the batch-mean (or -sum) cross-entropy at the global weights (kind=gradient).
FedAvg: K local SGD steps, each on the next batch of B images (cycling when N < B*K), then the weight
delta or the full local weights (kind=delta|weights). The images' order is the client's data order.
"""

from __future__ import annotations

import copy
import fnmatch
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from fedaudit import __version__
from fedaudit.client.local_sgd import client_loss, local_sgd
from fedaudit.errors import InputError
from fedaudit.io.update import UpdateMeta
from fedaudit.models import ModelSpec


@dataclass
class CaptureConfig:
    batch_size: int
    local_steps: int = 1
    lr: float | None = None
    kind: str | None = None  # None: gradient for one step, delta for more
    reduction: str = "mean"
    delta_sign: str = "local_minus_global"
    bn_mode: str = "train"
    momentum: float = 0.0
    weight_decay: float = 0.0
    withhold: tuple[str, ...] = ()  # fnmatch patterns of tensor names left out of the upload
    include_buffers: bool | None = None  # None: delta/weights carry the BN buffers (as Flower/NVFlare state_dicts
    # do), a gradient does not; True attaches them to a gradient too (the client's buffers after its forward)
    source: dict = field(default_factory=dict)

    def resolved_kind(self) -> str:
        return self.kind or ("gradient" if self.local_steps == 1 else "delta")


@dataclass
class Capture:
    tensors: dict[str, torch.Tensor]
    meta: UpdateMeta
    step: torch.Tensor  # for each image, the index of the local batch it belongs to


def check_recipe(n: int, batch_size: int, local_steps: int, kind: str, lr: float | None, items: str = "images",
                 momentum: float = 0.0, weight_decay: float = 0.0) -> None:
    """Refuse a client recipe that cannot run on ``n`` ``items``: batches that do not split them, a gradient of
    more than one step or batch, a delta or weights upload without a finite step size, a momentum outside [0, 1) or a
    negative or infinite weight decay (image and text captures)."""
    if not (0 <= momentum < 1) or not (0 <= weight_decay < math.inf):  # NaN fails both
        raise InputError(f"--momentum must be in [0, 1) and --weight-decay finite and >= 0; got {momentum}, "
                         f"{weight_decay}")
    if batch_size < 1 or local_steps < 1:
        raise InputError("--batch-size and --local-steps must be >= 1")
    from fedaudit.io.update import MAX_BATCH, MAX_STEPS

    # bounded before any step runs (issue 88: -k 1000000000 ran until killed); the same bounds as a recorded update's
    if local_steps > MAX_STEPS or batch_size > MAX_BATCH:
        raise InputError(f"--local-steps {local_steps:,} or --batch-size {batch_size:,} is above what fedaudit records "
                         f"({MAX_STEPS:,} steps, {MAX_BATCH:,} images a step)")
    if n % batch_size:
        raise InputError(f"{n} {items} do not split into batches of {batch_size}")
    if kind == "gradient":
        if local_steps != 1:
            raise InputError("a gradient upload is one step; use --kind delta or weights for --local-steps > 1")
        if n != batch_size:
            raise InputError(f"a one-step gradient uses exactly one batch: {n} {items} but --batch-size {batch_size}")
    elif lr is None or not (0 < lr < math.inf):
        raise InputError(f"a {kind} upload needs --lr, a finite step size > 0 (got {lr})")


def _validate(cfg: CaptureConfig, n: int) -> str:
    kind = cfg.resolved_kind()
    check_recipe(n, cfg.batch_size, cfg.local_steps, kind, cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return kind


def bn_momentum(model: nn.Module) -> float | str | None:
    """The BatchNorm momentum the model trains with ("cumulative" for momentum=None; None without BatchNorm)."""
    values = {m.momentum for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)}
    if not values:
        return None
    if len(values) > 1:
        raise InputError(f"the model's BatchNorm layers use different momenta {sorted(map(str, values))}; fedaudit records one")
    m = values.pop()
    return "cumulative" if m is None else float(m)


def capture_update(model: nn.Module, spec: ModelSpec, images: torch.Tensor, labels: torch.Tensor,
                   cfg: CaptureConfig, base_sha256: str | None = None) -> Capture:
    kind = _validate(cfg, images.shape[0])
    model = copy.deepcopy(model)
    model.train(cfg.bn_mode == "train")
    params = dict(model.named_parameters())
    nb = images.shape[0] // cfg.batch_size
    step = torch.arange(images.shape[0], device="cpu") // cfg.batch_size
    buffers = cfg.include_buffers if cfg.include_buffers is not None else kind != "gradient"
    # parameters the forward never reaches (GoogLeNet's and Inception's auxiliary heads in the eval graph) are not
    # uploaded: the client's step does not change them (issue 87: autograd refused them, exit 3). Read from the
    # client's own pass: no gradient (FedSGD), no .grad after the local steps (FedAvg)
    if kind == "gradient":
        loss = client_loss(model, spec, images, labels, cfg.reduction)
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()), allow_unused=True)))
        unused = {k for k, g in grads.items() if g is None}
        out = {k: g for k, g in grads.items() if g is not None}
        if buffers:  # the buffers after the forward (train-mode BN moved its running statistics once)
            out.update({k: v.detach().clone() for k, v in model.state_dict().items() if k not in params})
    else:
        start = {k: v.detach().clone() for k, v in model.state_dict().items()}
        sels = [slice((k % nb) * cfg.batch_size, (k % nb + 1) * cfg.batch_size) for k in range(cfg.local_steps)]
        for p in params.values():
            p.grad = None  # a gradient the checkpoint's model carried in would hide an unreached parameter
        local_sgd(model, spec, ((images[s], labels[s]) for s in sels), float(cfg.lr or 0), cfg.momentum, cfg.weight_decay)
        unused = {k for k, p in params.items() if p.requires_grad and p.grad is None}
        end = model.state_dict()
        names = [k for k in end if (k in params or buffers) and k not in unused]
        if kind == "weights":
            out = {k: end[k].detach().clone() for k in names}
        else:
            sign = 1 if cfg.delta_sign == "local_minus_global" else -1
            out = {k: sign * (end[k].detach() - start[k]) for k in names}
    out = {k: v for k, v in out.items() if not any(fnmatch.fnmatchcase(k, pat) for pat in cfg.withhold)}
    if not any(k in params for k in out):
        raise InputError("--withhold removes every parameter; nothing would be uploaded")
    meta = UpdateMeta(
        kind=kind,
        delta_sign=cfg.delta_sign if kind == "delta" else None,
        reduction=cfg.reduction if kind == "gradient" else None,
        batch_size=cfg.batch_size,
        local_steps=cfg.local_steps,
        local_lr=cfg.lr if kind != "gradient" else None,
        num_examples=images.shape[0],
        bn_mode=cfg.bn_mode,
        bn_momentum=bn_momentum(model) if buffers and any(k not in params for k in out) else None,
        base_checkpoint_sha256=base_sha256,
        optimizer={"name": "sgd", "momentum": cfg.momentum, "weight_decay": cfg.weight_decay},
        defenses=[],
        source={"tool": f"fedaudit {__version__} capture", "withheld": list(cfg.withhold),
                **({"not_in_graph": sorted(unused)} if unused else {}), **cfg.source},
    )
    return Capture(out, meta, step)
