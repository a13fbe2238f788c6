"""The ``Net`` of PyTorch's CIFAR-10 tutorial, which Flower's PyTorch quickstart trains (LeNet-5 with ReLU and
max-pooling): conv 5x5 (6) -> ReLU -> max-pool 2 -> conv 5x5 (16) -> ReLU -> max-pool 2 -> linear 120 -> ReLU ->
linear 84 -> ReLU -> linear (classes). That code calls ``F.relu`` and one shared pool; here they are modules (the
same arithmetic), so the parameter names and their order (``conv1``, ``conv2``, ``fc1``, ``fc2``, ``fc3``) are the
tutorial's and a Flower client's positional arrays map onto this model (docs/flower.md). Its two hidden linear
layers make it a hidden-split case (docs/methods/labels.md).
"""

from __future__ import annotations

from torch import nn

from fedaudit.models.registry import register_model


class FlowerCNN(nn.Module):
    def __init__(self, num_classes: int = 10, input_shape=(3, 32, 32)):
        super().__init__()
        channels, height, width = input_shape
        self.conv1 = nn.Conv2d(channels, 6, 5)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        side_h, side_w = ((height - 4) // 2 - 4) // 2, ((width - 4) // 2 - 4) // 2
        if side_h < 1 or side_w < 1:
            raise ValueError(f"flower-cnn needs inputs of at least 16 x 16 pixels, got {height} x {width}")
        self.fc1 = nn.Linear(16 * side_h * side_w, 120)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(120, 84)
        self.relu4 = nn.ReLU()
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.flatten(self.pool2(self.relu2(self.conv2(x))))
        return self.fc3(self.relu4(self.fc2(self.relu3(self.fc1(x)))))


@register_model("flower-cnn", "Flower's PyTorch quickstart CNN: 2 conv 5x5 (6, 16) + ReLU + max-pool, linear 120, 84, "
                "classes", paper="Flower quickstart (flwr new, PyTorch); LeCun et al. 1998")
def flower_cnn(num_classes, input_shape, **kwargs):
    return FlowerCNN(num_classes, input_shape, **kwargs)
