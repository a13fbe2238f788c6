"""Model registry: every architecture a checkpoint may name (``fedaudit models`` lists them)."""

from fedaudit.models import cifar_resnet, convnet, lenet, mlp, torchvision_models  # noqa: F401  (registration)
from fedaudit.models.registry import MODELS, ModelEntry, ModelSpec, build_model, final_linear, is_custom_arch

__all__ = ["MODELS", "ModelEntry", "ModelSpec", "build_model", "final_linear", "is_custom_arch"]
