"""Model registry: every architecture a checkpoint may name (``fedaudit models`` lists them)."""

from fedaudit.models import cifar_resnet, convnet, flower_cnn, imprint, lenet, mlp, pretrained, torchvision_models, vit  # noqa: F401  (registration)
from fedaudit.models.build import build_model, is_custom_arch
from fedaudit.models.registry import MODELS, ModelEntry, ModelSpec, final_linear

__all__ = ["MODELS", "ModelEntry", "ModelSpec", "build_model", "final_linear", "is_custom_arch"]
