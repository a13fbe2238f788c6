"""`reconstruct imprint` on a batch of 64 through a model built to leak, beside breaching's own analytic attack
(issue 89's target: PSNR >= 40 dB on >= 90% of the images, breaching's figure for its attack, run side by side).

Two constructions, each attacked by both implementations on the same recorded gradient:

* fedaudit's ``imprint`` architecture (fedaudit/models/imprint.py: Robbing the Fed's block, a Gaussian query, Normal
  bins whose mean and spread the server fitted on public images that are not the client's) before a CIFAR ResNet-18;
* breaching 0.1.2's ``ImprintBlock`` (its Robbing-the-Fed configuration: a Fourier query of mode 32, Laplace bins)
  inserted before the first convolution of a torchvision ResNet-18, as breaching's malicious server places it.

The client: 64 public 32 x 32 images (foolbox's 20 CIFAR-10 and 20 CIFAR-100 test images, 24 crops of scikit-image's
photographs), one FedSGD step (BatchNorm in train mode). Each recovered image is matched one-to-one to the batch
(PSNR in [0, 1] pixel space, capped at 100 dB like fedaudit's metrics). The bin count is swept: an image is recovered
exactly only when it is alone between two thresholds, so the share recovered grows with bins / B.

    PYTHONPATH=. .venv/bin/python -m benchmarks.imprint        # needs breaching (the bench extra) for its columns
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from benchmarks.common import RESULTS, threat_model
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, cifar10_samples, foolbox_samples, natural_patches
from fedaudit.metrics.matching import match
from fedaudit.models import ModelSpec, build_model
from fedaudit.models.normalize import denormalize, normalize

OUT = RESULTS / "imprint.json"
B = 64
BINS = (128, 512, 1024, 2048)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    x10, y10, _ = cifar10_samples()
    x100, y100, _ = foolbox_samples("cifar100")
    x = torch.cat([x10, x100, natural_patches(B - 40, 32, seed=5)])[:B]
    y = torch.cat([y10, y100 % 10, torch.arange(B - 40) % 10])[:B]
    return x.contiguous(), y.long()


def per_image_psnr(recon: torch.Tensor, x: torch.Tensor) -> list[float]:
    """PSNR of each true image against its one-to-one matched reconstruction."""
    out = []
    for t, r in match(recon, x):  # (truth index, reconstruction index)
        mse = float((recon[r] - x[t]).double().pow(2).mean())
        out.append(100.0 if mse <= 1e-10 else min(100.0, -10.0 * math.log10(mse)))
    return out


def summary(values: list[float], name: str, bins: int, extra: dict | None = None) -> dict:
    n40 = sum(v >= 40 for v in values)
    return {"construction": name, "bins": bins, "B": B, "psnr_ge_40": n40, "share_ge_40": n40 / B,
            "median_psnr": float(torch.tensor(values).median()), **(extra or {})}


def fedaudit_construction(bins: int, x: torch.Tensor, y: torch.Tensor) -> list[dict]:
    from fedaudit.attacks.imprint import solve

    base = ModelSpec("imprint", 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD, {"base": "resnet18", "bins": bins})
    probe = build_model(base).imprint.linear0.weight[0]
    q = probe / probe.norm()
    public = natural_patches(256, 32, seed=11)  # the server's own public images, none of them the client's
    proj = normalize(public, base).flatten(1) @ q
    spec = ModelSpec("imprint", 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD,
                     {"base": "resnet18", "bins": bins, "mu": float(proj.mean()), "sigma": float(proj.std())})
    torch.manual_seed(0)
    model = build_model(spec)
    tm = threat_model(spec, model, x, y, CaptureConfig(batch_size=B, bn_mode="train"))
    images, diag = solve(tm, "imprint.linear0", B)
    ours = denormalize(images.float(), spec).clamp(0, 1)
    rows = [summary(per_image_psnr(ours, x), "fedaudit imprint arch (Gaussian query, Normal bins)", bins,
                    {"attack": "fedaudit reconstruct imprint", "non_empty_bins": diag["non_empty_bins"]})]
    theirs = breaching_attack(model, tm, spec, "imprint.linear0", "cumulative")
    if theirs is not None:
        rows.append(summary(per_image_psnr(theirs, x), rows[0]["construction"], bins, {"attack": "breaching ImprintAttacker"}))
    return rows


def breaching_construction(bins: int, x: torch.Tensor, y: torch.Tensor) -> list[dict]:
    try:
        from breaching.cases.malicious_modifications.imprint import ImprintBlock
        from breaching.cases.malicious_modifications.parameter_utils import replace_module_by_instance
    except ImportError:
        return []
    from fedaudit.attacks.imprint import solve

    spec = ModelSpec("torchvision.resnet18", 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD)
    torch.manual_seed(0)
    model = build_model(spec)
    block = ImprintBlock([3, 32, 32], bins, connection="linear", gain=1.0, linfunc="fourier", mode=32)
    replace_module_by_instance(model, model.conv1, torch.nn.Sequential(block, model.conv1))
    tm = threat_model(spec, model, x, y, CaptureConfig(batch_size=B, bn_mode="train"))
    name = "conv1.0.linear0"
    images, diag = solve(tm, name, B)
    ours = denormalize(images.float(), spec).clamp(0, 1)
    label = "breaching ImprintBlock (Fourier query, Laplace bins) before a ResNet-18"
    rows = [summary(per_image_psnr(ours, x), label, bins, {"attack": "fedaudit reconstruct imprint",
                                                           "non_empty_bins": diag["non_empty_bins"]})]
    theirs = breaching_attack(model, tm, spec, name, block.structure)
    if theirs is not None:
        rows.append(summary(per_image_psnr(theirs, x), label, bins, {"attack": "breaching ImprintAttacker"}))
    return rows


def breaching_attack(model, tm, spec: ModelSpec, layer: str, structure: str) -> torch.Tensor | None:
    """breaching 0.1.2's ImprintAttacker on the same gradient, its images in [0, 1] (None without breaching)."""
    try:
        import breaching
    except ImportError:
        return None
    cfg = breaching.get_config(overrides=["case=1_single_image_small", "case/data=CIFAR10", "attack=imprint"])
    cfg.case.data.mean, cfg.case.data.std = list(spec.mean), list(spec.std)
    setup = {"device": torch.device("cpu"), "dtype": torch.float}
    attacker = breaching.attacks.prepare_attack(model, torch.nn.CrossEntropyLoss(), cfg.attack, setup)
    names = [n for n, _ in model.named_parameters()]
    grads = [tm.gradient[n].detach().float() for n in names]
    payload = [{"parameters": [p.detach() for p in model.parameters()], "buffers": [b for b in model.buffers()],
                "metadata": cfg.case.data}]
    shared = [{"gradients": grads, "buffers": None,
               "metadata": {"num_data_points": B, "labels": None, "local_hyperparams": None}}]
    secrets = {"ImprintBlock": {"weight_idx": names.index(f"{layer}.weight"), "bias_idx": names.index(f"{layer}.bias"),
                                "shape": (3, 32, 32), "structure": structure}}
    rec, _ = attacker.reconstruct(payload, shared, secrets, dryrun=False)
    return denormalize(rec["data"].float(), spec).clamp(0, 1)[:B]


def table(rows: list[dict]) -> str:
    lines = ["| construction | bins | attack | images >= 40 dB (of 64) | share | median PSNR |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['construction']} | {r['bins']} | {r['attack']} | {r['psnr_ge_40']} | "
                     f"{100 * r['share_ge_40']:.0f}% | {r['median_psnr']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return 0
    torch.set_num_threads(2)
    x, y = batch()
    rows = []
    for bins in BINS:
        rows += fedaudit_construction(bins, x, y) + breaching_construction(bins, x, y)
        print(table(rows[-4:]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
