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

Each pair also gets the rank of its own original among the candidates and the LPIPS margin to the nearest other one;
it is *firm* when it is identified under every one-pixel shift of the reconstruction too (a near-tie that a shift
overturns is within the judge's noise), *possible* when under at least one. The null references (the attack's
initialisation, a blank, the batch mean at B >= 2) are read the same way: how often an attack that learnt nothing
would be "identified". fedaudit/metrics/band.py turns these into the measured band's point and range.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from fedaudit.data.offline import public_distractors
from fedaudit.metrics.lpips import load_lpips, lpips_features, lpips_pairwise

DISTRACTORS = 64
METHOD = ("nearest original by LPIPS among the batch's originals and public distractors (CIFAR-100 test images, "
          "photograph crops); identified when it is the reconstruction's own and the reconstruction is closer to it "
          "than a blank image (black or mid-gray) is; firm when that holds under every one-pixel shift of the "
          "reconstruction, possible when under any; null references (the attack's initialisation, a blank, the batch "
          "mean) read the same way, identified when their nearest candidate is the original")
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
    keep = torch.ones(len(distractors), dtype=torch.bool, device=distractors.device)
    for original in truth:  # one original at a time: a [n, B, C, H, W] difference would be GBs at 224 px
        keep &= (distractors - original).abs().flatten(1).amax(1) > SAME
    return keep


SHIFTS = ((1, 0), (-1, 0), (0, 1), (0, -1))  # one pixel right, left, down, up: a change no viewer would notice


def shifted(x: torch.Tensor, dx: int, dy: int) -> torch.Tensor:
    """``x`` [N,C,H,W] moved by (dx, dy) pixels, the vacated border filled by replicating the edge."""
    pad = torch.nn.functional.pad(x, (1, 1, 1, 1), mode="replicate")
    h, w = x.shape[-2:]
    return pad[..., 1 - dy:1 - dy + h, 1 - dx:1 - dx + w]


def _judge(d: torch.Tensor, t: int) -> tuple[int, float]:
    """(rank of candidate ``t`` by LPIPS distance ``d`` [candidates]: 1 = nearest, margin = nearest other - own)."""
    others = torch.cat([d[:t], d[t + 1:]])
    return 1 + int((others < d[t]).sum()), float(others.min() - d[t]) if len(others) else math.inf


def identify(recon: torch.Tensor, truth: torch.Tensor, pairs: list[tuple[int, int]], net: str = "vgg",
             weights: str | None = None, distractors: int = DISTRACTORS,
             init: torch.Tensor | None = None) -> dict[str, Any]:
    """Per matched pair (truth index, recon index): the rank of (and LPIPS margin to) the reconstruction's own
    original among the candidates, whether it is identified, firmly (under every one-pixel shift too) or possibly
    (under at least one), and the same reading of the null references: the attack's initialisation ``init`` (when
    given), a blank (the nearer of black and mid-gray) and the batch mean (B >= 2: at B = 1 it is the original)."""
    lp = load_lpips(net, weights)
    if lp.model is None:
        return {"rate": None, "reason": lp.reason, "net": net, "method": METHOD}
    truth = truth.float().cpu()
    own = lpips_features(lp, truth)
    images, others = _distractors(net, weights, distractors, tuple(truth.shape[1:]))
    keep = _not_in_batch(images, truth)
    distractors = int(keep.sum())
    candidates = [torch.cat([a, b[keep]]) for a, b in zip(own, others)]
    x = recon.float().cpu()
    # every query against the candidates in one backbone pass and one pairwise product (the candidates' features
    # are prepared once): the reconstruction, its four one-pixel shifts, the blank control (a constant image's LPIPS
    # to each original, the lower of black and mid-gray), and the initialisation and batch-mean nulls
    queries = {"recon": x, **{f"moved{i}": shifted(x, dx, dy) for i, (dx, dy) in enumerate(SHIFTS)},
               "blank": torch.stack([torch.full(truth.shape[1:], v, device="cpu") for v in (0.0, 0.5)])}
    if init is not None and init.shape == recon.shape:
        queries["initialisation"] = init.float().cpu()
    if truth.shape[0] >= 2:
        queries["batch_mean"] = truth.mean(0, keepdim=True)
    every = lpips_pairwise(lp, torch.cat(list(queries.values())), candidates)
    assert every is not None
    got = dict(zip(queries, every.split([len(q) for q in queries.values()])))
    d, d_blank = got["recon"], got["blank"]
    moved = [got[f"moved{i}"] for i in range(len(SHIFTS))]
    floor, which = d_blank[:, :truth.shape[0]].min(0)
    recon_of = {t: r for t, r in pairs}
    # each null reference's LPIPS distances to the candidates, per truth index t (row t stands in for t's reconstruction)
    nulls: dict[str, dict[int, torch.Tensor]] = {"blank": {t: d_blank[int(which[t])] for t in recon_of}}
    if "initialisation" in got:
        nulls["initialisation"] = {t: got["initialisation"][r] for t, r in recon_of.items()}
    if "batch_mean" in got:
        nulls["batch_mean"] = {t: got["batch_mean"][0] for t in recon_of}
    n_candidates = truth.shape[0] + distractors
    rows = []
    null_counts = {name: 0 for name in nulls}
    for t, r in pairs:
        rank, margin = _judge(d[r], t)
        beats_blank = bool(d[r, t] < floor[t])
        identified = rank == 1 and beats_blank
        under_shift = [_judge(m[r], t)[0] == 1 and bool(m[r, t] < floor[t]) for m in moved if m is not None]
        row: dict[str, Any] = {
            "truth_index": t, "recon_index": r, "identified": identified, "rank": rank, "margin": margin,
            "firm": identified and all(under_shift), "possible": identified or any(under_shift),
            "nearest_candidate": int(d[r].argmin()), "nearest_is_distractor": int(d[r].argmin()) >= truth.shape[0],
            "lpips_to_own": float(d[r, t]), "blank_lpips_to_own": float(floor[t]), "beats_blank": beats_blank,
            "views": [identified, *under_shift], "nulls": {}}
        for name, nd in nulls.items():
            null_rank, null_margin = _judge(nd[t], t)
            row["nulls"][name] = {"rank": null_rank, "margin": null_margin}
            null_counts[name] += null_rank == 1
        rows.append(row)
    k = sum(row["identified"] for row in rows)
    rate = k / max(len(rows), 1)
    # identified images in each view (the reconstruction, then each one-pixel shift): the band's range reads the
    # strictest and the most lenient view (fedaudit/metrics/band.py)
    views = [sum(bool(row["views"][v]) for row in rows) for v in range(1 + len(SHIFTS))]
    return {"rate": rate, "identified": k, "of": len(rows), "views": views, "firm": sum(row["firm"] for row in rows),
            "possible": sum(row["possible"] for row in rows),
            "nulls": {name: {"identified": c, "of": len(rows)} for name, c in null_counts.items()},
            "band": identification_band(rate), "chance": 1 / n_candidates, "candidates": n_candidates,
            "distractors": distractors, "net": net, "backbone_source": lp.source, "per_image": rows, "method": METHOD}
