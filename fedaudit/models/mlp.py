"""Fully connected network: the GDBR paper's MLP (6 hidden FC-ReLU layers [2048..64], then the output FC).

``bias=False`` gives the bias-removal setting GDBR targets (Scheliga et al. defense). ``head_init="gdbr"`` draws
the last hidden layer and the output layer from U(0.01, 0.2), the positive "bottom layer" initialisation of the
GDBR paper (section V); the default keeps PyTorch's initialisation.
"""

from __future__ import annotations

import math
from typing import cast

from torch import nn

from fedaudit.models.registry import register_model

GDBR_HIDDEN = (2048, 1024, 512, 256, 128, 64)


class MLP(nn.Module):
    def __init__(self, num_classes: int = 10, input_shape=(3, 32, 32), hidden=GDBR_HIDDEN, bias: bool = True,
                 head_init: str = "torch"):
        super().__init__()
        sizes = [math.prod(input_shape), *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for cin, cout in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(cin, cout, bias=bias), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(sizes[-1], num_classes, bias=bias)
        if head_init == "gdbr":
            for layer in (cast(nn.Linear, self.features[-2]), self.fc):
                nn.init.uniform_(layer.weight, 0.01, 0.2)
        elif head_init != "torch":
            raise TypeError(f"head_init must be 'torch' or 'gdbr', got {head_init!r}")

    def forward(self, x):
        return self.fc(self.features(x))


@register_model("mlp", "MLP: hidden FC-ReLU layers (GDBR default [2048,1024,512,256,128,64]), output FC",
                paper="Zhang et al. (GDBR)")
def mlp(num_classes, input_shape, **kwargs):
    return MLP(num_classes, input_shape, **kwargs)
