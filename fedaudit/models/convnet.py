"""The ConvNet of Inverting Gradients (Geiping et al. 2020): 8 conv-BN-ReLU layers, 3 max-pools, 1 linear.

``width`` is the channel multiplier (the paper uses 64); tests and samples use a narrow one.
"""

from __future__ import annotations

from torch import nn

from fedaudit.models.registry import flat_features, register_model


def _block(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]


class ConvNet(nn.Module):
    def __init__(self, num_classes: int = 10, input_shape=(3, 32, 32), width: int = 64):
        super().__init__()
        w = width
        self.features = nn.Sequential(
            *_block(input_shape[0], w),
            *_block(w, 2 * w),
            *_block(2 * w, 2 * w),
            *_block(2 * w, 4 * w),
            nn.MaxPool2d(2),
            *_block(4 * w, 4 * w),
            *_block(4 * w, 4 * w),
            nn.MaxPool2d(2),
            *_block(4 * w, 4 * w),
            *_block(4 * w, 4 * w),
            nn.MaxPool2d(2),
        )
        was_training = self.training
        self.features.eval()  # the dry forward must not touch BN running statistics
        self.fc = nn.Linear(flat_features(self.features, input_shape), num_classes)
        self.features.train(was_training)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


@register_model("convnet", "Inverting Gradients ConvNet: 8 conv-BN-ReLU, 3 max-pool, linear (width=64)",
                paper="Geiping et al. 2020")
def convnet(num_classes, input_shape, **kwargs):
    return ConvNet(num_classes, input_shape, **kwargs)
