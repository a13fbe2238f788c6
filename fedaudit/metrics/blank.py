"""The floor: how the strongest *uninformative* reconstruction scores against the truth.

PSNR rewards closeness in mean intensity, so a reconstruction that learnt nothing already scores well above 0 dB:
a mid-gray image about 12.2 dB on 16 CIFAR-10 photographs, all-black 11.0 dB on MNIST digits. Black and gray are
not the strongest such images. Each image's own mean colour (a flat image of its per-channel mean) beats every
constant (the mean minimises the squared error): 13.5 dB on the same CIFAR-10 images, 15.0 dB on ImageNet
photographs, 1.2-1.8 dB above gray. A reconstruction of flat patches in the victim's colours measured "high" at
+5 to +7 dB over a black-or-gray floor with nothing recognisable (issue 86). So the floor each image is read against
is the best of these *null references*:

* ``black`` and ``gray``: the constants 0 and 0.5;
* ``mean_colour``: the image's own per-channel mean, flat (what a colour histogram's first moment gives away);
* ``dataset_mean``: the pixelwise mean of the public images shaped like it (fedaudit/data/public.py: the layout
  every photograph shares, brighter sky above, a centred subject), when such images exist;
* ``dataset_mean_recoloured``: that mean image shifted to the image's own mean colour.

None of these shows anything of the image beyond its average colour, so a reconstruction must beat all of them to
show anything the metric can see; the measured band (fedaudit/metrics/band.py) counts PSNR only ``MARGIN_DB`` above
this floor. ``blank_baseline`` keeps the black/gray figures (and the floor's breakdown) for the report.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from fedaudit.metrics import ssim as ssim_mod
from fedaudit.metrics.psnr import psnr

BLANKS = {"black": 0.0, "gray": 0.5}
NULLS = ("black", "gray", "mean_colour", "dataset_mean", "dataset_mean_recoloured")
METHOD = ("per image, the best PSNR of the null references: black (0), mid-gray (0.5), the image's own mean colour "
          "(flat, per channel), the public images' pixelwise mean at its shape, and that mean shifted to the image's "
          "own mean colour; 'floor' is the higher batch mean of the constants black and gray (reported beside it)")


@functools.lru_cache(maxsize=8)
def dataset_mean(shape: tuple[int, ...]) -> torch.Tensor | None:
    """The pixelwise mean [C, H, W] of the public images of ``shape`` (fedaudit/data/public.py), or None."""
    from fedaudit.data.public import public_images

    images, _ = public_images(shape)
    return None if images is None else images.float().mean(0)


def null_references(truth: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each null reference as a batch [N, C, H, W] aligned with ``truth`` (the uninformative reconstructions)."""
    truth = truth.float().cpu()
    colour = truth.mean((2, 3), keepdim=True).expand_as(truth)
    out = {name: torch.full_like(truth, v) for name, v in BLANKS.items()}
    out["mean_colour"] = colour.contiguous()
    mean = dataset_mean(tuple(truth.shape[1:]))
    if mean is not None:
        out["dataset_mean"] = mean.expand_as(truth).contiguous()
        out["dataset_mean_recoloured"] = (mean - mean.mean((1, 2), keepdim=True) + colour).clamp(0, 1)
    return out


def null_psnr(truth: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per null reference, its PSNR against each image [N]."""
    truth = truth.float().cpu()
    return {name: psnr(ref, truth) for name, ref in null_references(truth).items()}


def floor_per_image(truth: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    """Per image, the best PSNR of the null references (its floor) and which reference set it."""
    return _best(null_psnr(truth))


def _best(scores: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[str]]:
    names = list(scores)
    best, which = torch.stack([scores[n] for n in names]).max(0)
    return best, [names[int(i)] for i in which]


def blank_psnr_per_image(truth: torch.Tensor) -> torch.Tensor:
    """Per image, its floor: the best PSNR of the null references against it (``floor_per_image``)."""
    return floor_per_image(truth)[0]


def blank_baseline(truth: torch.Tensor) -> dict[str, Any]:
    """Mean PSNR and SSIM of each constant image against ``truth`` [N,C,H,W] in [0,1] and the higher PSNR of the two
    (``floor``, as before), and every null reference's mean PSNR (``nulls``) with how often each set an image's floor
    (``floor_set_by``)."""
    truth = truth.float().cpu()
    out: dict[str, Any] = {}
    for name, value in BLANKS.items():
        blank = torch.full_like(truth, value)
        out[name] = {"psnr": float(psnr(blank, truth).double().mean()),
                     "ssim": float(ssim_mod.ssim(blank, truth).double().mean())}
    floor = max(BLANKS, key=lambda n: out[n]["psnr"])
    out["floor"] = {"image": floor, "psnr": out[floor]["psnr"], "ssim": out[floor]["ssim"]}
    scores = null_psnr(truth)
    best, which = _best(scores)
    out["nulls"] = {name: float(v.double().mean()) for name, v in scores.items()}
    out["null_floor_psnr"] = float(best.double().mean())
    out["floor_set_by"] = {name: which.count(name) for name in scores if which.count(name)}
    return out
