"""Where gradient matching on a small ViT stops, and why (issue 67): the cosine gradient distance minimised to
convergence (L-BFGS, strong-Wolfe line search) from random images and from the true images plus noise (an oracle
start: the truth is read here, never by an attack).

    PYTHONPATH=. .venv/bin/python -m benchmarks.vit_landscape --sizes 1,4 --batch-seeds 0,1

If random starts converge to a distance as small as the truth's basin gives, at an image below the blank floor, the
objective has near-exact spurious minima there and no budget of the same objective reaches the images; if the truth's
basin is much lower, restarts that compare final distances could. The update is the FedSGD gradient of foolbox's
CIFAR-10 photographs through ``vit-tiny`` at random init (``benchmarks.vit_leakage``'s), the labels the true ones.
Rows: ``benchmarks/results/vit_landscape.jsonl``; docs/results/vit.md, "Why gradient matching stops".
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from benchmarks.common import RESULTS, markdown, threat_model
from benchmarks.records import append_row, grid_arguments, grid_rows
from benchmarks.vit_leakage import MODELS, victims
from fedaudit.attacks.engine import GradientEngine
from fedaudit.attacks.objectives import cosine_distance
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD
from fedaudit.metrics.blank import blank_psnr_per_image
from fedaudit.metrics.psnr import psnr
from fedaudit.models import ModelSpec, build_model

OUT = RESULTS / "vit_landscape.jsonl"
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def converge(engine: GradientEngine, labels: torch.Tensor, x0: torch.Tensor, evaluations: int) -> torch.Tensor:
    """``x0`` moved by L-BFGS on the cosine distance to the update until it stops (``evaluations`` at most)."""
    x = x0.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([x], lr=1, max_iter=20, history_size=50, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = cosine_distance(engine.gradient(x, labels), engine.target.tensors, engine.target.norm)
        loss.backward()
        return loss

    for _ in range(evaluations // 20):
        opt.step(closure)
    return x.detach().clamp(0, 1)


def run(model: str, b: int, batch_seed: int, start: str, evaluations: int) -> dict:
    arch, side, kwargs = MODELS[model]
    mean, std = (CIFAR10_MEAN, CIFAR10_STD) if side == 32 else IMAGENET
    spec = ModelSpec(arch, 10, (3, side, side), mean, std, kwargs)
    torch.manual_seed(0)  # the model's init, as vit_leakage's seed 0
    net = build_model(spec).eval()
    x, y = victims(side, b, batch_seed)
    engine = GradientEngine(threat_model(spec, net, x, y, CaptureConfig(batch_size=b, bn_mode="eval")))
    gen = torch.Generator().manual_seed(1)
    noise = float(start.split("+")[1]) if start.startswith("truth+") else None
    x0 = torch.rand(x.shape, generator=gen) if noise is None else (x + noise * torch.randn(x.shape, generator=gen)).clamp(0, 1)
    t0 = time.perf_counter()
    found = converge(engine, y, x0, evaluations)
    distance = float(cosine_distance(engine.gradient(found, y, create_graph=False), engine.target.tensors,
                                     engine.target.norm))
    floor = blank_psnr_per_image(x)
    return {"model": model, "B": b, "batch_seed": batch_seed, "start": start, "evaluations": evaluations,
            "distance": distance, "psnr": float(psnr(found, x).mean()), "start_psnr": float(psnr(x0, x).mean()),
            "floor": float(floor.mean()), "seconds": round(time.perf_counter() - t0, 1)}


def table(rows: list[dict]) -> str:
    cells = [[r["model"], r["B"], r["batch_seed"], r["start"], r["evaluations"], f"{r['distance']:.1e}",
              f"{r['start_psnr']:.1f}", f"{r['psnr']:.1f}", f"{r['psnr'] - r['floor']:+.1f}"] for r in rows]
    return markdown(["model", "B", "batch seed", "start", "evaluations", "final 1 - cos", "start PSNR (dB)",
                     "final PSNR (dB)", "vs blank floor"], cells)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="vit-tiny")
    ap.add_argument("--sizes", default="1,4")
    ap.add_argument("--batch-seeds", default="0,1")
    ap.add_argument("--starts", default="random,truth+0.1")
    ap.add_argument("--evaluations", type=int, default=600)
    grid_arguments(ap, OUT)
    args = ap.parse_args(argv)
    rows = grid_rows(args)
    if not args.table:
        done = {(r["model"], r["B"], r["batch_seed"], r["start"], r["evaluations"]) for r in rows}
        for model in args.models.split(","):
            for b in (int(v) for v in args.sizes.split(",")):
                for seed in (int(v) for v in args.batch_seeds.split(",")):
                    for start in args.starts.split(","):
                        if (model, b, seed, start, args.evaluations) in done:
                            continue
                        row = run(model, b, seed, start, args.evaluations)
                        append_row(args.out, row)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
