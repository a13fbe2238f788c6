"""torchvision's ImageNet architectures, built with ``weights=None`` (no download; the checkpoint
supplies the weights). ``torchvision.<name>`` works for any classification model torchvision lists;
the common ones are registered so that ``fedaudit models`` shows them. torchvision is imported only when one is
built or looked up (importing ``torchvision.models`` pulls in torch._dynamo, about a second of every command's
start-up)."""

from __future__ import annotations

from fedaudit.errors import InputError
from fedaudit.models.registry import MODELS, ModelEntry

PREFIX = "torchvision."
LISTED = ("resnet18", "resnet34", "resnet50", "vgg11", "mobilenet_v2", "densenet121", "alexnet")


def _factory(tv_name: str):
    def build(num_classes, input_shape, **kwargs):
        if input_shape[0] != 3:
            raise TypeError(f"torchvision {tv_name} takes 3 input channels, not {input_shape[0]}")
        import warnings

        import torchvision

        with warnings.catch_warnings():  # GoogLeNet/Inception warn of a future default init on every build
            warnings.simplefilter("ignore", FutureWarning)
            return torchvision.models.get_model(tv_name, weights=None, num_classes=num_classes, **kwargs)

    return build


def _entry(tv_name: str) -> ModelEntry:
    return ModelEntry(PREFIX + tv_name, _factory(tv_name), f"torchvision {tv_name} (weights=None)", (3, 224, 224), "torchvision")


def torchvision_entry(name: str) -> ModelEntry:
    """The entry for ``torchvision.<name>``; registered lazily for unlisted classification models."""
    import torchvision

    tv_name = name[len(PREFIX):]
    if tv_name not in torchvision.models.list_models(module=torchvision.models):
        raise InputError(f"torchvision has no classification model {tv_name!r}")
    return _entry(tv_name)


for _n in LISTED:  # known names: listed without importing torchvision (a test checks torchvision has each)
    MODELS.add(PREFIX + _n, _entry(_n))
