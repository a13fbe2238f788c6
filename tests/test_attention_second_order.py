"""Gradient matching differentiates a gradient; torchvision's ViTs compute attention with a fused kernel that has
no derivative of its backward (fedaudit/models/attention.py). The attack engine runs them on the math kernel."""

from __future__ import annotations

import pytest
import torch
from torchvision.models.vision_transformer import VisionTransformer

from benchmarks.common import threat_model
from fedaudit.attacks.engine import GradientEngine
from fedaudit.attacks.objectives import cosine_distance
from fedaudit.client.capture import CaptureConfig
from fedaudit.models import ModelSpec
from fedaudit.models.attention import differentiable_attention


def _small_torchvision_vit() -> VisionTransformer:
    torch.manual_seed(0)
    net = VisionTransformer(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                            num_classes=4).eval()
    torch.nn.init.normal_(net.heads.head.weight, std=0.02)  # torchvision's zero head passes no gradient back
    return net


def _second_order(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    loss = torch.nn.functional.cross_entropy(net(x), torch.tensor([1]))
    g = torch.autograd.grad(loss, list(net.parameters()), create_graph=True)
    (gx,) = torch.autograd.grad(sum((v * v).sum() for v in g), [x])
    return gx


def test_the_math_kernel_differentiates_a_torchvision_vits_gradient():
    net = _small_torchvision_vit()
    x = torch.rand(1, 3, 16, 16, requires_grad=True)
    try:
        _second_order(net, x)
    except RuntimeError as e:  # the fused kernel, where this build picks it (it did on x86 CPUs with torch 2.14)
        assert "not implemented" in str(e)
    with differentiable_attention():
        gx = _second_order(net, x)
    assert torch.isfinite(gx).all() and gx.abs().sum() > 0


def test_the_attack_engine_matches_a_torchvision_vits_gradient():
    net = _small_torchvision_vit()
    spec = ModelSpec("torchvision.vit_b_16", 4, (3, 16, 16), (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), {})
    x, y = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)), torch.tensor([1])
    engine = GradientEngine(threat_model(spec, net, x, y, CaptureConfig(batch_size=1, bn_mode="eval")))
    dummy = torch.rand(1, 3, 16, 16, requires_grad=True)
    distance = cosine_distance(engine.gradient(dummy, y), engine.target.tensors, engine.target.norm)
    (step,) = torch.autograd.grad(distance, [dummy])
    assert torch.isfinite(step).all() and step.abs().sum() > 0
    truth = cosine_distance(engine.gradient(x, y, create_graph=False), engine.target.tensors, engine.target.norm)
    assert float(truth.detach()) == pytest.approx(0.0, abs=1e-5)  # the true image's gradient is the update's
