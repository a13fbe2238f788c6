"""PNG encoding and the comparison grid (truth row above reconstruction row)."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image


def to_pil(img: torch.Tensor) -> Image.Image:
    """[C,H,W] float in [0,1] -> 8-bit PIL image (L or RGB)."""
    arr = (img.detach().float().clamp(0, 1).cpu().numpy() * 255.0 + 0.5).astype(np.uint8)
    return Image.fromarray(arr[0], "L") if arr.shape[0] == 1 else Image.fromarray(arr.transpose(1, 2, 0), "RGB")


def png_bytes(img: Image.Image | torch.Tensor) -> bytes:
    pil = to_pil(img) if isinstance(img, torch.Tensor) else img
    buf = io.BytesIO()
    pil.save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def grid(rows: list[list[torch.Tensor | None]], min_cell: int = 64, pad: int = 2) -> Image.Image:
    """Rows of [C,H,W] images (None leaves a blank cell), upscaled by an integer factor (nearest) so that
    a cell is at least ``min_cell`` px, on a white background."""
    first = next(img for row in rows for img in row if img is not None)
    _, h, w = first.shape
    scale = max(1, -(-min_cell // max(h, w)))
    ch, cw = h * scale, w * scale
    ncols = max(len(r) for r in rows)
    canvas = Image.new("RGB", (ncols * (cw + pad) + pad, len(rows) * (ch + pad) + pad), "white")
    for ri, row in enumerate(rows):
        for ci, img in enumerate(row):
            if img is None:
                continue
            cell = to_pil(img).convert("RGB").resize((cw, ch), Image.Resampling.NEAREST)
            canvas.paste(cell, (pad + ci * (cw + pad), pad + ri * (ch + pad)))
    return canvas
