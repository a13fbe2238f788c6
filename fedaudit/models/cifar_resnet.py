"""CIFAR-style ResNets (He et al. 2016 with a 3x3 stride-1 stem and no max-pool), as FedLeak, RGLA and
Refiner evaluate them at 32x32. ``width`` is the first stage's channel count (64 standard; FedLeak's
ResNet10_x3 is width=192). ``activation="sigmoid"`` replaces every ReLU by a sigmoid, as FedLeak's released demo
does (and DLG's LeNet): a smooth model that gradient inversion finds much easier. Parameter names follow
torchvision (conv1, bn1, layer1..4, fc)."""

from __future__ import annotations

from torch import nn

from fedaudit.models.registry import register_model

ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid}


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, cout: int, stride: int = 1, activation: str = "relu"):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = ACTIVATIONS[activation]()
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class CifarResNet(nn.Module):
    def __init__(self, blocks, num_classes: int = 10, input_shape=(3, 32, 32), width: int = 64,
                 activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, not {activation!r}")
        self.conv1 = nn.Conv2d(input_shape[0], width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = ACTIVATIONS[activation]()
        cin = width
        for i, n in enumerate(blocks):
            cout = width * 2**i
            stage = [BasicBlock(cin if j == 0 else cout, cout, stride=(1 if i == 0 or j > 0 else 2), activation=activation)
                     for j in range(n)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*stage))
            cin = cout
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


_DEPTHS = {"resnet10": (1, 1, 1, 1), "resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}

for _name, _blocks in _DEPTHS.items():
    register_model(_name, f"CIFAR-style ResNet-{_name[6:]} (3x3 stem, no max-pool; width=64)",
                   paper="He et al. 2016")(
        lambda num_classes, input_shape, _b=_blocks, **kw: CifarResNet(_b, num_classes, input_shape, **kw)
    )
