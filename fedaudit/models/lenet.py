"""The LeNet of DLG (Zhu et al., "Deep Leakage from Gradients", 2019).

Three 5x5 conv layers with 12 channels and sigmoid activations, then one linear layer. DLG
initialises every weight and bias from U(-0.5, 0.5); that is the default here because leakage
results on this model depend on it (``init="torch"`` keeps PyTorch's default init).
"""

from __future__ import annotations

from torch import nn

from fedaudit.models.registry import flat_features, register_model


class LeNet(nn.Module):
    def __init__(self, num_classes: int = 10, input_shape=(3, 32, 32), init: str = "uniform"):
        super().__init__()
        channels = input_shape[0]
        self.body = nn.Sequential(
            nn.Conv2d(channels, 12, kernel_size=5, padding=2, stride=2),
            nn.Sigmoid(),
            nn.Conv2d(12, 12, kernel_size=5, padding=2, stride=2),
            nn.Sigmoid(),
            nn.Conv2d(12, 12, kernel_size=5, padding=2, stride=1),
            nn.Sigmoid(),
        )
        self.fc = nn.Linear(flat_features(self.body, input_shape), num_classes)
        if init == "uniform":
            for p in self.parameters():
                nn.init.uniform_(p, -0.5, 0.5)
        elif init != "torch":
            raise TypeError(f"init must be 'uniform' or 'torch', got {init!r}")

    def forward(self, x):
        return self.fc(self.body(x).flatten(1))


@register_model("lenet", "DLG LeNet: 3 conv(5x5,12)+sigmoid, 1 linear; U(-0.5,0.5) init", paper="Zhu et al. 2019")
def lenet(num_classes, input_shape, **kwargs):
    return LeNet(num_classes, input_shape, **kwargs)
