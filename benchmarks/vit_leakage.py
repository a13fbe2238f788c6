"""Leakage of vision transformers' updates: APRIL's closed form against gradient matching (issue 67).

    .venv/bin/python -m benchmarks.vit_leakage                      # the CPU grid (resumable), then the table
    .venv/bin/python -m benchmarks.vit_leakage --table              # docs/results/vit.md's table from the rows
    .venv/bin/python -m benchmarks.vit_leakage --models vit-b16 --sizes 1 --iterations 50   # the 224 px ViT-B/16

Each row goes through the one job layer as a reviewer's run would (``ReconstructJob``, labels by the attack's
default, the truth read only by the metrics): FedSGD gradients of real photographs (foolbox's CIFAR-10 images at 32
px, its ImageNet photographs at 64 and 224 px) through ``vit-tiny``, ``vit-tiny64`` and torchvision's ``vit_b_16``
at random init; B = 1, 4, 16; ``april`` (B = 1 only: it says not applicable elsewhere) against ``ig`` and ``fedleak``
at a short CPU budget. Reported: PSNR against the per-image blank floor, the identification rate, the measured band
and seconds per iteration. Rows: ``benchmarks/results/vit_leakage.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from benchmarks.common import RESULTS, markdown, threat_model
from benchmarks.records import append_row, grid_arguments, grid_rows
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, foolbox_samples, imagenet_samples
from fedaudit.errors import NotApplicable
from fedaudit.io.truth import Truth
from fedaudit.jobs import ReconstructJob, Session
from fedaudit.models import ModelSpec, build_model

OUT = RESULTS / "vit_leakage.jsonl"
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
MODELS = {"vit-tiny": ("vit-tiny", 32, {}), "vit-tiny64": ("vit-tiny64", 64, {}),
          "vit-b16": ("torchvision.vit_b_16", 224, {})}


def victims(side: int, b: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, _ = foolbox_samples("cifar10") if side == 32 else imagenet_samples(side)
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:b]
    return x[idx].contiguous(), y[idx] % 10


def parse_options(text: str) -> dict:
    """``"pos-weight=1,patch-prior=0.1"`` -> the attack's options (numbers as floats); ``""`` -> none."""
    return {k.strip(): float(v) for k, v in (item.split("=") for item in text.split(",") if item)}


def run(model: str, b: int, attack: str, iterations: int, seed: int, options: dict | None = None,
        device: str = "cpu") -> dict:
    arch, side, kwargs = MODELS[model]
    mean, std = (CIFAR10_MEAN, CIFAR10_STD) if side == 32 else IMAGENET
    spec = ModelSpec(arch, 10, (3, side, side), mean, std, kwargs)
    torch.manual_seed(seed)
    net = build_model(spec).eval()
    if model == "vit-b16":  # torchvision zero-initialises the head, which passes no gradient back at round 0 (april
        torch.nn.init.normal_(net.heads.head.weight, std=0.02)  # says so): a later round's, any non-zero head
    x, y = victims(side, b, seed)
    tm = threat_model(spec, net, x, y, CaptureConfig(batch_size=b, bn_mode="eval"))
    session = Session.create(device=device, seed=seed, quiet=True)
    truth = Truth(x, y, torch.zeros(b, dtype=torch.long), [])
    row = {"model": model, "B": b, "attack": attack, "iterations": iterations, "seed": seed, "device": device}
    if options:
        row["options"] = options
    t0 = time.perf_counter()
    try:
        loop = {"iterations": iterations} if attack != "april" else None
        r = ReconstructJob(session, tm, attack, options or None, loop, proxies=0).run(truth).report.to_json()
    except NotApplicable as e:
        return {**row, "not_applicable": str(e)}
    m = r["metrics"]
    return {**row, "seconds": round(time.perf_counter() - t0, 2), "attack_seconds": r["timings"]["attack"],
            "seconds_per_iteration": r["attack"]["seconds_per_iteration"], "psnr": m["summary"]["psnr"]["mean"],
            "above_floor": m["psnr_above_blank"], "identified": (m.get("identification") or {}).get("rate"),
            "band": m["risk_band"], "range": m["risk_band_range"]}


def table(rows: list[dict]) -> str:
    """The rows sorted by model, B, seed (the attacks in run order; "not applicable" where the attack said so)."""
    order = list(MODELS)
    cells = []
    for r in sorted(rows, key=lambda r: (order.index(r["model"]), r["B"], r["seed"])):
        opts = " ".join(f"--{k} {v:g}" for k, v in (r.get("options") or {}).items())
        head = [r["model"], r["B"], r["seed"], f"{r['attack']} {opts}".strip(), r.get("device", "cpu")]
        if "not_applicable" in r:
            cells.append(head + ["-", "not applicable", "", "", "", ""])
            continue
        closed = r["attack"] == "april"
        cells.append(head + ["closed form" if closed else r["iterations"], f"{r['psnr']:.1f}", f"{r['above_floor']:+.1f}",
                             "n/a" if r["identified"] is None else f"{r['identified']:.2f}", f"{r['band']} {r['range']}",
                             f"{r['attack_seconds']:.3f} s (one solve)" if closed else f"{r['seconds_per_iteration']:.3f}"])
    return markdown(["model", "B", "seed", "attack", "device", "iterations", "PSNR (dB)", "vs blank floor", "identified",
                     "band", "s / iteration"], cells)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="vit-tiny,vit-tiny64")
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--attacks", default="april,ig,fedleak")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--options", default="", help="the attacks' options, e.g. pos-weight=1,patch-prior=0.1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="where the attacks run (cpu, cuda)")
    grid_arguments(ap, OUT)
    args = ap.parse_args(argv)
    done = grid_rows(args)
    if not args.table:
        options = parse_options(args.options)
        keys = {(r["model"], r["B"], r["attack"], r["iterations"] if r["attack"] != "april" else 0, r["seed"],
                 json.dumps(r.get("options") or {}, sort_keys=True), r.get("device", "cpu")) for r in done}
        for model in args.models.split(","):
            for b in (int(v) for v in args.sizes.split(",")):
                for attack in args.attacks.split(","):
                    key = (model, b, attack, args.iterations if attack != "april" else 0, args.seed,
                           json.dumps(options, sort_keys=True), args.device)
                    if key in keys:
                        continue
                    row = run(model, b, attack, args.iterations, args.seed, options, args.device)
                    append_row(args.out, row)
                    done.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    print(table(done))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
