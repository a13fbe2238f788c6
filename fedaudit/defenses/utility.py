"""What a defense costs the model: how far the upload moved, and (with labelled evaluation images) the accuracy
of the model after one SGD step with the defended vs the true update."""

from __future__ import annotations

import torch

from fedaudit.models.normalize import normalize
from fedaudit.threat_model import ThreatModel


def relative_error(true: dict[str, torch.Tensor], defended: dict[str, torch.Tensor]) -> dict[str, float]:
    a = torch.cat([true[k].reshape(-1).double() for k in true])
    b = torch.cat([defended[k].reshape(-1).double() for k in true])
    return {"relative_gradient_error": float((b - a).norm() / a.norm().clamp_min(1e-300)),
            "cosine_to_true": float((a @ b) / (a.norm() * b.norm()).clamp_min(1e-300))}


def accuracy_after_step(tm: ThreatModel, grads: dict[str, torch.Tensor], images: torch.Tensor, labels: torch.Tensor,
                        lr: float) -> float:
    """Top-1 accuracy (eval mode) of w - lr * g on the evaluation images; withheld tensors keep the global value."""
    params = {k: v.detach().clone() for k, v in tm.model.named_parameters()}
    for k, g in grads.items():
        params[k] = params[k] - lr * g.to(params[k].dtype)
    state = {**params, **{k: v.clone() for k, v in tm.model.named_buffers()}}
    model = tm.model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(images), 256):
            logits = torch.func.functional_call(model, state, (normalize(images[i:i + 256], tm.spec),))
            correct += int((logits.argmax(1) == labels[i:i + 256]).sum())
    return correct / max(len(images), 1)
