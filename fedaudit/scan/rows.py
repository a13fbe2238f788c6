"""Rows that are copies of each other (up to scale and sign), found in O(rows x fan-in): rows normalised, their
sign fixed, sorted by a random projection; neighbours within the tolerance are compared in full. Shared by the
duplicate-row and bias-ladder checks."""

from __future__ import annotations

import torch

COPY_COS = 1.0 - 1e-6  # |cosine| a copy reaches: float32 rounding of a scaled row stays above it


def nonzero_rows(m: torch.Tensor) -> torch.Tensor:
    """Indices of rows whose norm is above float noise relative to the largest (zeroed rows are another check's)."""
    norms = m.norm(dim=1)
    top = float(norms.max()) if norms.numel() else 0.0
    return torch.nonzero(norms > max(top * 1e-6, 1e-30)).flatten()


def copy_groups(m: torch.Tensor, seed: int = 0) -> list[list[int]]:
    """Groups (two rows or more) of rows of ``m`` that are scaled copies of one another (|cos| >= COPY_COS)."""
    idx = nonzero_rows(m)
    if idx.numel() < 2:
        return []
    u = m[idx] / m[idx].norm(dim=1, keepdim=True)
    g = torch.Generator().manual_seed(seed)
    probe = torch.randn(u.shape[1], 2, generator=g, dtype=u.dtype)
    p = u @ probe
    u = u * torch.where(p[:, :1] < 0, -1.0, 1.0).to(u.dtype)  # a row and its negation are one direction
    key = (u @ probe)[:, 1]
    order = torch.argsort(key)
    ku, kk = u[order], key[order]
    close = torch.nonzero((kk[1:] - kk[:-1]).abs() <= 1e-5).flatten()
    groups: list[list[int]] = []
    for j in close.tolist():
        if float((ku[j] * ku[j + 1]).sum()) >= COPY_COS:
            a, b = int(idx[order[j]]), int(idx[order[j + 1]])
            if groups and groups[-1][-1] == a:
                groups[-1].append(b)
            else:
                groups.append([a, b])
    return groups
