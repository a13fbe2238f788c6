"""Identification: would a reviewer recognise which original each reconstruction shows? An automatic stand-in
for FedLeak's human-judged attack success rate (docs/metrics.md, Identification).

Each reconstruction, matched one-to-one to its original, is *identified* when its nearest image by LPIPS among
the candidates (every original of the batch plus public distractor images nobody trained on) is that original.
The rate is the identified fraction; chance is 1 / (batch + distractors). The blank control: a reconstruction
also has to be nearer its original (LPIPS) than a constant image (the nearer of all-black and mid-gray) is.
Without it, on MNIST digits (dark, unlike the photographic distractors) a blank or noise reconstruction was
"identified" as the nearest digit: a B = 1 run drowned in DP noise (PSNR 2.9 dB) measured "very high". LPIPS uses real backbone weights; when
the attacked model is itself one of LPIPS's backbones (VGG16, AlexNet), the other backbone is used, so the
judge is not the network the attack optimised through. Without LPIPS weights the result is null with the reason.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from fedaudit.data.offline import public_distractors
from fedaudit.metrics.lpips import load_lpips, lpips_features, lpips_pairwise

DISTRACTORS = 64
METHOD = ("nearest original by LPIPS among the batch's originals and public distractors (CIFAR-100 test images, "
          "photograph crops); identified when it is the reconstruction's own and the reconstruction is closer to it "
          "than a blank image (black or mid-gray) is")
# identification rate -> band (a reviewer who recognises a quarter of a batch has seen private images)
THRESHOLDS = {"medium": 0.25, "high": 0.5, "very_high": 0.75}


def judge_net(attacked_arch: str | None, preferred: str) -> str:
    """The LPIPS backbone that judges: ``preferred``, unless that is the attacked network's own family."""
    arch = (attacked_arch or "").lower()
    if preferred == "vgg" and "vgg" in arch:
        return "alex"
    if preferred == "alex" and "alexnet" in arch:
        return "vgg"
    return preferred


def identification_band(rate: float) -> str:
    band = "low"
    for name, lo in THRESHOLDS.items():
        if rate >= lo:
            band = name
    return band


SAME = 2 / 255  # a distractor this close (max pixel difference) to an original is that original


@functools.lru_cache(maxsize=8)
def _distractors(net: str, weights: str | None, n: int, shape: tuple[int, ...]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The distractor images and their LPIPS features, computed once per process for each backbone and shape."""
    images = public_distractors(n, shape)
    return images, lpips_features(load_lpips(net, weights), images)


def _not_in_batch(distractors: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Mask of the distractors that are none of the batch's originals: a public image can be a victim too (a
    batch of CIFAR-100 test images), and a copy of the original among the distractors would compete with it."""
    keep = torch.ones(len(distractors), dtype=torch.bool)
    for original in truth:  # one original at a time: a [n, B, C, H, W] difference would be GBs at 224 px
        keep &= (distractors - original).abs().flatten(1).amax(1) > SAME
    return keep


def identify(recon: torch.Tensor, truth: torch.Tensor, pairs: list[tuple[int, int]], net: str = "vgg",
             weights: str | None = None, distractors: int = DISTRACTORS) -> dict[str, Any]:
    """Per matched pair (truth index, recon index): whether the reconstruction's nearest candidate is its original."""
    lp = load_lpips(net, weights)
    if lp.model is None:
        return {"rate": None, "reason": lp.reason, "net": net, "method": METHOD}
    own = lpips_features(lp, truth.float().cpu())
    images, others = _distractors(net, weights, distractors, tuple(truth.shape[1:]))
    keep = _not_in_batch(images, truth.float().cpu())
    distractors = int(keep.sum())
    candidates = [torch.cat([a, b[keep]]) for a, b in zip(own, others)]
    d = lpips_pairwise(lp, recon.float().cpu(), candidates)
    # the blank control: a constant image's LPIPS to each original (the lower of black and mid-gray)
    blanks = torch.stack([torch.full(truth.shape[1:], v) for v in (0.0, 0.5)])
    floor = lpips_pairwise(lp, blanks, own)
    assert d is not None and floor is not None
    floor = floor.min(0).values
    n_candidates = truth.shape[0] + distractors
    rows = []
    for t, r in pairs:
        nearest = int(d[r].argmin())
        beats_blank = bool(d[r, t] < floor[t])
        rows.append({"truth_index": t, "recon_index": r, "identified": nearest == t and beats_blank,
                     "nearest_candidate": nearest, "nearest_is_distractor": nearest >= truth.shape[0],
                     "lpips_to_own": float(d[r, t]), "blank_lpips_to_own": float(floor[t]), "beats_blank": beats_blank})
    rate = sum(row["identified"] for row in rows) / max(len(rows), 1)
    return {"rate": rate, "identified": sum(row["identified"] for row in rows), "of": len(rows),
            "band": identification_band(rate), "chance": 1 / n_candidates, "candidates": n_candidates,
            "distractors": distractors, "net": net, "backbone_source": lp.source, "per_image": rows, "method": METHOD}
