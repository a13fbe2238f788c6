"""Gradient distances shared by the attacks (each a function of lists of per-tensor gradients).

No distance concatenates the gradients into one vector: that copied every parameter-sized tensor on every
iteration (on a CIFAR ResNet-18 at B = 4 on one CPU thread, 0.94 s per IG step against 0.68-0.74 s for the
per-tensor form below; docs/results/throughput.md). Reductions run tensor by tensor as one BLAS dot each on the CPU,
and as grouped ``torch._foreach_*`` kernels (a handful of launches for the whole list) on CUDA. A fixed target's norm
is computed once, in float64 (``Target.norm``).
"""

from __future__ import annotations

import functools
import operator

import torch


def total(terms: list[torch.Tensor]) -> torch.Tensor:
    """The sum of scalar tensors, added left to right (what ``sum()`` does, typed)."""
    return functools.reduce(operator.add, terms)


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One vector of all tensors (a copy: for results and diagnostics, not inside an attack's iteration)."""
    return torch.cat([t.reshape(-1) for t in tensors])


def _grouped(tensors: list[torch.Tensor] | tuple[torch.Tensor, ...], grouped: bool | None) -> bool:
    """Grouped foreach kernels on CUDA (``grouped`` forces either form; both run on any device)."""
    return (bool(tensors) and tensors[0].is_cuda) if grouped is None else grouped


def squared_norm(a: list[torch.Tensor] | tuple[torch.Tensor, ...], grouped: bool | None = None) -> torch.Tensor:
    """sum_i ||a_i||^2 over the list."""
    if _grouped(a, grouped):
        return torch.stack(torch._foreach_norm(a)).square().sum()
    return torch.stack([torch.vdot(t.reshape(-1), t.reshape(-1)) for t in a]).sum()


def dot(a: list[torch.Tensor] | tuple[torch.Tensor, ...], b: list[torch.Tensor] | tuple[torch.Tensor, ...],
        grouped: bool | None = None) -> torch.Tensor:
    """sum_i <a_i, b_i> over the list. On CUDA by polarisation, (||a + b||^2 - ||a - b||^2) / 4, which is four
    grouped kernels instead of two launches per tensor."""
    if _grouped(a, grouped):
        return (squared_norm(torch._foreach_add(a, b), True) - squared_norm(torch._foreach_sub(a, b), True)) / 4
    return torch.stack([torch.vdot(x.reshape(-1), y.reshape(-1)) for x, y in zip(a, b)]).sum()


def reference_norm(b: list[torch.Tensor]) -> torch.Tensor:
    """||b|| over the list in float64, returned in b's dtype (for a target computed once, not per iteration)."""
    return torch.sqrt(sum((t.double().square().sum() for t in b), torch.zeros((), dtype=torch.float64,
                                                                                device=b[0].device))).to(b[0].dtype)


def cosine_distance(a: list[torch.Tensor], b: list[torch.Tensor], b_norm: torch.Tensor | None = None,
                    grouped: bool | None = None) -> torch.Tensor:
    """1 - cos over all tensors as one vector (Inverting Gradients). ``b_norm``: b's norm when already known."""
    nb = reference_norm(b) if b_norm is None else b_norm
    return 1 - dot(a, b, grouped) / (squared_norm(a, grouped).sqrt() * nb).clamp_min(1e-30)


def l2_distance(a: list[torch.Tensor], b: list[torch.Tensor], grouped: bool | None = None) -> torch.Tensor:
    """Sum of squared differences over all tensors (DLG)."""
    grouped = _grouped(a, grouped)
    return squared_norm(torch._foreach_sub(a, b) if grouped else [x - y for x, y in zip(a, b)], grouped)


# --- restarts as one batch: every tensor of ``a`` has a leading restart axis [R, *shape]; ``b`` is the target ---

def cosine_distance_rows(a: list[torch.Tensor], b: list[torch.Tensor], b_norm: torch.Tensor) -> torch.Tensor:
    """[R]: ``cosine_distance(a[r], b, b_norm)`` for every restart r, as one matrix-vector product per tensor.

    Stacked targets (``b_norm`` of shape [G], every ``b`` tensor [G, *shape]; fedaudit/attacks/stacked_targets.py):
    the R rows are G consecutive groups of R / G rows, and group g's rows are matched against target g."""
    norms = row_norms(a)
    if b_norm.dim() == 0:
        dots = torch.stack([x.flatten(1) @ y.reshape(-1) for x, y in zip(a, b)]).sum(0)
        return 1 - dots / (norms * b_norm).clamp_min(1e-30)
    groups = b_norm.shape[0]
    rows = a[0].shape[0]
    per = rows // groups
    dots = torch.stack([torch.einsum("grn,gn->gr", x.reshape(groups, per, -1), y.reshape(groups, -1)).reshape(rows)
                        for x, y in zip(a, b)]).sum(0)
    return 1 - dots / (norms * b_norm.repeat_interleave(per)).clamp_min(1e-30)


def row_norms(a: list[torch.Tensor]) -> torch.Tensor:
    """[R]: the norm of each row over every tensor of ``a`` (each [R, *shape])."""
    return torch.stack([torch.linalg.vector_norm(x.flatten(1), dim=1).square() for x in a]).sum(0).sqrt()
