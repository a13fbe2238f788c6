"""Attention that second-order gradients can pass through.

Gradient matching differentiates a gradient: the backward pass of the model's forward is itself differentiated. The
fused kernels of ``torch.nn.functional.scaled_dot_product_attention`` (flash and memory-efficient attention, on the
CPU as on CUDA) have no derivative of their backward: torchvision's ViTs, whose ``nn.MultiheadAttention`` calls it,
failed in every optimisation attack with "derivative for aten::_scaled_dot_product_flash_attention_for_cpu_backward
is not implemented". Inside ``differentiable_attention()`` the call takes the math kernel (plain matmul and softmax),
the same attention in float rounding, whose backward differentiates. The context is read when the forward runs.
"""

from __future__ import annotations

import contextlib

import torch


def differentiable_attention() -> contextlib.AbstractContextManager:
    """A context in which scaled-dot-product attention runs its math kernel (torch >= 2.3; before, the CUDA switch:
    torch 2.1-2.2 had no fused CPU kernel to avoid)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # torch < 2.3
        return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)
    return sdpa_kernel([SDPBackend.MATH])
