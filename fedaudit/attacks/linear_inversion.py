"""Analytic input recovery through a chain of fully connected layers (RGLA's Eq. 5, applied layer by layer).

For a linear layer with input a [B, D] and per-sample output gradients delta [B, K] (mean-reduced loss folded
in), the weight gradient is gW = delta^T a, so a = pinv(delta^T) gW whenever rank(delta) = B. Starting from the
output layer (delta = G, a = the recovered features f'), each ReLU(Linear) step back gives
delta_prev = (delta W) * 1[a > 0] (the ReLU's derivative read off its own output), and then that layer's input.
When the chain reaches the model's input (through at most a Flatten), the images follow: no generator and no
optimisation. Only Linear, ReLU and Flatten may sit between the input and the output layer.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch import nn

ACTIVE = 1e-4


def fc_chain(model: nn.Module, final: str) -> list[str] | None:
    """Names of the Linear layers from the input to ``final`` when the model is exactly
    input -> [Flatten] -> Linear -> ReLU -> ... -> Linear(final); otherwise None."""
    try:
        graph = fx.symbolic_trace(model).graph
    except Exception:  # noqa: BLE001 - an untraceable model just has no analytic path
        return None
    modules = dict(model.named_modules())
    out = [n for n in graph.nodes if n.op == "output"][0].args[0]

    def module(node):
        return modules.get(node.target) if isinstance(node, fx.Node) and node.op == "call_module" else None

    if not (isinstance(module(out), nn.Linear) and out.target == final):
        return None
    chain, node = [final], out.args[0]
    while True:
        if isinstance(module(node), nn.Flatten) or (node.op == "call_method" and node.target in ("flatten", "view", "reshape")):
            node = node.args[0]
        if node.op == "placeholder":
            return chain
        if not isinstance(module(node), nn.ReLU):
            return None
        node = node.args[0]
        if not isinstance(module(node), nn.Linear):
            return None
        chain.insert(0, node.target)
        node = node.args[0]


def invert_chain(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], chain: list[str],
                 G: torch.Tensor, features: torch.Tensor) -> tuple[torch.Tensor, list[dict[str, Any]]]:
    """The chain's input [B, D] from the output gradient G [B, C] and the recovered features (float64), with the
    conditioning of every solve (rank and condition number of each delta)."""
    delta, a = G.double(), features.double()
    diagnostics = []
    for upper, lower in zip(reversed(chain[1:]), reversed(chain[:-1])):
        W = params[f"{upper}.weight"].double()
        # ReLU derivative from its output; recovered zeros carry float noise (~1e-7 of the scale), so "active"
        # means above ACTIVE of the sample's largest activation rather than > 0
        delta = (delta @ W) * (a > ACTIVE * a.abs().amax(dim=1, keepdim=True)).double()
        sv = torch.linalg.svdvals(delta)
        diagnostics.append({"layer": lower, "rank": int(torch.linalg.matrix_rank(delta)),
                            "condition_number": float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf")})
        gW = grads[f"{lower}.weight"].double()
        a = torch.linalg.pinv(delta.T) @ gW
    return a, diagnostics
