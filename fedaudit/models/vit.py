"""Small vision transformers for 32 and 64 px inputs (Dosovitskiy et al. 2021), timm's layout and names.

Patch embedding (a p x p convolution of stride p, ``patch_embed``), a class token (``cls_token``) and a learnable
absolute position embedding (``pos_embed``, [1, 1 + Np, D]) added to every token, then pre-LayerNorm blocks
(``x + attn(norm1(x))``, ``x + mlp(norm2(x))``; attention's q, k and v packed in one ``qkv`` linear map, rows
[q; k; v], as timm), a final LayerNorm and a linear head on the class token. No dropout.

The learnable position embedding is the channel APRIL reads (fedaudit/attacks/april.py): its gradient is the
upstream gradient of every token, so with the patch embedding's weight gradient a single image is a linear solve.
``--arch-kwargs '{"pos_embed": "sincos"}'`` makes it a fixed 2-D sine-cosine buffer instead (no gradient: the
closed form does not apply, as on models that use one).

Registered: ``vit-tiny`` (32 px, patch 4, 64 patches) and ``vit-tiny64`` (64 px, patch 8, 64 patches), both
D = 128, 4 blocks, 4 heads, MLP 256: small enough for the CPU, with D >= Np so that the closed form is exact.
``torchvision.vit_b_16`` (224 px) resolves through the torchvision models.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fedaudit.models.registry import register_model


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        if dim % heads:
            raise TypeError(f"width {dim} is not a multiple of {heads} heads")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def sincos_embedding(grid: int, dim: int) -> torch.Tensor:
    """A fixed 2-D sine-cosine position embedding [1, 1 + grid^2, D] (MAE's), the class token's row zero."""
    if dim % 4:
        raise TypeError(f"a sine-cosine embedding needs a width divisible by 4, got {dim}")
    ys, xs = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64),
                            indexing="ij")
    freq = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim // 4))
    parts = [f(pos.flatten()[:, None] * freq[None]) for pos in (ys, xs) for f in (torch.sin, torch.cos)]
    return torch.cat([torch.zeros(1, dim, dtype=torch.float64), torch.cat(parts, 1)]).float()[None]


class VisionTransformer(nn.Module):
    def __init__(self, num_classes: int = 10, input_shape=(3, 32, 32), patch: int = 4, width: int = 128,
                 depth: int = 4, heads: int = 4, mlp: int = 256, pos_embed: str = "learned"):
        super().__init__()
        c, h, w = input_shape
        if h != w or h % patch:
            raise TypeError(f"input {h}x{w} does not split into {patch}x{patch} patches on a square grid")
        grid = h // patch
        self.patch = patch
        self.patch_embed = nn.Conv2d(c, width, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        if pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.randn(1, 1 + grid * grid, width) * 0.02)
        elif pos_embed == "sincos":
            self.register_buffer("pos_embed", sincos_embedding(grid, width))
        else:
            raise TypeError(f"pos_embed must be 'learned' or 'sincos', got {pos_embed!r}")
        nn.init.normal_(self.cls_token, std=0.02)
        self.blocks = nn.Sequential(*[Block(width, heads, mlp) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)  # [B, Np, D], patches row-major over the grid
        tokens = torch.cat([self.cls_token.expand(len(x), -1, -1), tokens], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(tokens))[:, 0])


@register_model("vit-tiny", "ViT for 32 px: patch 4, width 128, 4 pre-LN blocks, 4 heads, learnable position embedding",
                paper="Dosovitskiy et al. 2021")
def vit_tiny(num_classes, input_shape, **kwargs):
    return VisionTransformer(num_classes, input_shape, **{"patch": 4, **kwargs})


@register_model("vit-tiny64", "ViT for 64 px: patch 8, width 128, 4 pre-LN blocks, 4 heads, learnable position embedding",
                default_input_shape=(3, 64, 64), paper="Dosovitskiy et al. 2021")
def vit_tiny64(num_classes, input_shape, **kwargs):
    return VisionTransformer(num_classes, input_shape, **{"patch": 8, **kwargs})
