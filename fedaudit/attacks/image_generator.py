"""An untrained convolutional image generator used as an image prior (deep-image-prior style).

The attack optimises the generator's weights, not the pixels: x' = G_theta(z) for a fixed Gaussian code z
(one row per image). A convolutional net fits natural image structure long before it fits noise (Ulyanov et al.
2018), which is what the released FedLeak code relies on (docs/methods/attacks.md, fedleak-dip). This is an extension,
not FedLeak's Algorithm 1, and nothing here is trained on data: the prior is the architecture alone.

The net, written functionally over a dict of tensors so the shared loop can checkpoint it like any variable:
z (B x code) -> linear to width x h0 x w0 -> BN -> LeakyReLU(0.1); then one block per resolution, each
[nearest 2x upsample (not the first)] conv3x3 -> BN -> LeakyReLU -> conv3x3 -> BN -> LeakyReLU; then a 1x1 conv
to the image's channels and a sigmoid, so x' is in (0, 1). h0 x w0 is the image size halved as often as both
sides stay even and at least 4 (4x4 for 32 px, 7x7 for 28 or 224 px). Channels halve for each doubling past
32 px (at least width / 4). BatchNorm uses the batch's statistics (the B images).

Choices that differ from the released code, and why:
* no spectral normalisation: every conv is followed by BatchNorm, which cancels the weight's scale (and the conv
  bias) in the forward pass, so the convs carry no bias and the weight is used as is;
* a linear layer in place of the 4x4 transposed convolution of a 1x1 code (the same map).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def start_size(h: int, w: int) -> tuple[int, int, int]:
    """(h0, w0, number of 2x upsamplings): halve while both sides stay even and at least 4."""
    n = 0
    while h % (2 ** (n + 1)) == 0 and w % (2 ** (n + 1)) == 0 and min(h, w) // 2 ** (n + 1) >= 4:
        n += 1
    return h >> n, w >> n, n


class ImageGenerator:
    """Functional generator for images of ``shape`` (B, C, H, W): ``init`` draws the weights, ``__call__`` renders."""

    def __init__(self, shape: tuple[int, ...], width: int = 256, code_dim: int = 128):
        if width < 4 or code_dim < 1:
            raise ValueError("generator width must be >= 4 and the code size >= 1")
        self.batch, self.channels, h, w = shape
        self.width, self.code_dim = width, code_dim
        self.h0, self.w0, self.ups = start_size(h, w)
        self.widths = []
        for i in range(self.ups + 1):
            side = min(self.h0, self.w0) * 2 ** i
            halvings = max(0, int(math.log2(max(side, 1) / 32))) if side > 32 else 0
            self.widths.append(max(width >> halvings, max(width // 4, 1)))

    def init(self, gen: torch.Generator) -> dict[str, torch.Tensor]:
        """Weights drawn U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's default layer scale), BN at identity."""

        def uniform(*size, fan_in):
            b = 1 / math.sqrt(fan_in)
            return (torch.rand(size, generator=gen, device="cpu") * 2 - 1) * b  # drawn on the host

        p = {}
        c0 = self.widths[0]
        p["input.w"] = uniform(c0 * self.h0 * self.w0, self.code_dim, fan_in=self.code_dim)
        p["input.bn.w"], p["input.bn.b"] = torch.ones(c0, device="cpu"), torch.zeros(c0, device="cpu")
        c_in = c0
        for i, c in enumerate(self.widths):
            for j, ci in ((1, c_in), (2, c)):
                p[f"block{i}.conv{j}.w"] = uniform(c, ci, 3, 3, fan_in=ci * 9)
                p[f"block{i}.bn{j}.w"], p[f"block{i}.bn{j}.b"] = torch.ones(c, device="cpu"), torch.zeros(c, device="cpu")
            c_in = c
        p["rgb.w"] = uniform(self.channels, c_in, 1, 1, fan_in=c_in)
        p["rgb.b"] = uniform(self.channels, fan_in=c_in)
        return p

    def code(self, gen: torch.Generator) -> torch.Tensor:
        return torch.randn(self.batch, self.code_dim, generator=gen, device="cpu")

    @staticmethod
    def _bn_act(x, w, b):
        return F.leaky_relu(F.batch_norm(x, None, None, w, b, training=True), 0.1)

    def __call__(self, p: dict[str, torch.Tensor], z: torch.Tensor) -> torch.Tensor:
        x = F.linear(z, p["input.w"]).view(z.shape[0], self.widths[0], self.h0, self.w0)
        x = self._bn_act(x, p["input.bn.w"], p["input.bn.b"])
        for i in range(len(self.widths)):
            if i:
                x = F.interpolate(x, scale_factor=2, mode="nearest")
            for j in (1, 2):
                x = self._bn_act(F.conv2d(x, p[f"block{i}.conv{j}.w"], padding=1),
                                 p[f"block{i}.bn{j}.w"], p[f"block{i}.bn{j}.b"])
        return torch.sigmoid(F.conv2d(x, p["rgb.w"], p["rgb.b"]))


def median_filter(x: torch.Tensor, k: int) -> torch.Tensor:
    """k x k median over each channel (reflect padding at the borders); k <= 1 returns x. The released FedLeak
    code applies a 5 x 5 median to its final images."""
    if k <= 1:
        return x
    r = k // 2
    padded = F.pad(x, (r, k - 1 - r, r, k - 1 - r), mode="reflect")
    windows = padded.unfold(2, k, 1).unfold(3, k, 1)  # B, C, H, W, k, k
    return windows.reshape(*windows.shape[:4], k * k).median(-1).values
