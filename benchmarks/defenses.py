"""Defense benchmark: FedLeak and Inverting Gradients against each defense at the paper grids, on real CIFAR-10.

    .venv/bin/python -m benchmarks.defenses                  # LeNet, random init, B=1, 300 iterations per cell
    .venv/bin/python -m benchmarks.defenses --quick          # smoke run

The grids are FedLeak's evaluation (docs/methods/fedleak.md): pruning {0.1,...,0.9}, quantisation
{32,16,8,4,1} bits, DP with C = 1, delta = 1e-5, sigma = sqrt(2 ln(1/delta)) / epsilon for epsilon in
{1e5, 1e4, 1e3, 1e2} (alone and on top of Soteria 0.5, as the paper pairs them), Soteria {0.1,...,0.9}, plus
top-k sparsification and Refiner (critic trained here on natural patches) at eps {0.01, 0.1, 0.5}. It runs the
same matrix code as ``fedaudit audit`` (labels from ``auto``; FedLeak with its short-budget settings, as in
benchmarks/reconstruct.py). Utility is the relative error of the upload and its cosine to the true gradient.
Writes benchmarks/results/defenses.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, threat_model
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, cifar10_samples, natural_patches
from fedaudit.defenses.critic import CriticTraining, save_critic, train_critic
from fedaudit.io.truth import Truth
from fedaudit.jobs import AuditJob, Session
from fedaudit.jobs.audit import parse_defense_rows
from fedaudit.models import ModelSpec, build_model
from fedaudit.report.outdir import OutputDir

FEDLEAK_SHORT = {"lr": 0.03, "schedule": "none", "tv": 0.2, "blend": 0.3, "look-ahead": "descent", "signed": False}


def grid(critic: str, quick: bool) -> list[str]:
    if quick:
        return ["none", "prune:0.5", "dp:eps=1000:formula=fedleak", "quantize:4"]
    rows = ["none"]
    rows += [f"prune:{r}" for r in (0.1, 0.3, 0.5, 0.7, 0.9)]
    rows += [f"quantize:{b}" for b in (32, 16, 8, 4, 1)]
    rows += [f"dp:eps={e:g}:formula=fedleak" for e in (1e5, 1e4, 1e3, 1e2)]
    rows += [f"soteria:0.5+dp:eps={e:g}:formula=fedleak" for e in (1e5, 1e4, 1e3, 1e2)]
    rows += [f"soteria:{r}" for r in (0.1, 0.3, 0.5, 0.7, 0.9)]
    rows += [f"topk-sparsify:{k}" for k in (0.3, 0.1, 0.01)]
    rows += [f"refiner:critic={critic}:eps={e}" for e in (0.01, 0.1, 0.5)]
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    tmp = Path(tempfile.mkdtemp())
    critic_path = tmp / "critic.safetensors"
    t0 = time.perf_counter()
    critic, cinfo = train_critic(natural_patches(300 if args.quick else 1500, seed=7),
                                 CriticTraining(epochs=1 if args.quick else 4, batch_size=32, lr=2e-3, width=16))
    save_critic(critic_path, critic, cinfo)
    print(f"critic trained in {time.perf_counter() - t0:.0f} s; calibration {cinfo.get('calibration')}", file=sys.stderr)
    x_all, y_all, _ = cifar10_samples()
    b = args.batch
    spec = ModelSpec("lenet", 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD)
    torch.manual_seed(0)
    model = build_model(spec).eval()
    x, y = x_all[:b], y_all[:b]
    tm = threat_model(spec, model, x, y, CaptureConfig(batch_size=b, bn_mode="train"))
    rows = parse_defense_rows(",".join(grid(str(critic_path), args.quick)))
    truth = Truth(x, y, torch.zeros(b, dtype=torch.long), [str(i) for i in range(b)])
    iterations = 20 if args.quick else args.iterations
    job = AuditJob(Session(), tm, truth, rows, ["ig", "fedleak"], {"fedleak": FEDLEAK_SHORT}, iterations, 1, "auto")
    with OutputDir(tmp / "audit") as out:
        result = job.run(out, on_cell=lambda c: print(f"{c.defense} x {c.attack}: {c.psnr:.2f} dB",
                                                      file=sys.stderr, flush=True))
        out.commit()
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"iterations": iterations, "batch": b, "model": "lenet, random init", "critic": cinfo,
           "rows": [{"defense": r.defense, "utility": r.utility, "error": r.error} for r in result.rows],
           "cells": [{k: getattr(c, k) for k in ("defense", "attack", "psnr", "ssim", "lpips", "risk_band", "label_insacc", "error")}
                     for c in result.cells]}
    text = json.dumps(doc, indent=1).replace(str(critic_path), "CRITIC")
    (args.out / "defenses.json").write_text(text)
    (args.out / "defenses.md").write_text(markdown(json.loads(text)))
    print((args.out / "defenses.md").read_text())
    return 0


def markdown(doc) -> str:
    cells = {(c["defense"], c["attack"]): c for c in doc["cells"]}
    lines = [f"LeNet at random init, B={doc['batch']} real CIFAR-10 image(s), {doc['iterations']} iterations per attack "
             "(labels from `auto`); PSNR dB / SSIM, risk band; utility = relative L2 error of the upload (cosine to the "
             "true gradient).", "",
             "| defense | utility | IG | FedLeak (short) |", "|---|---|---|---|"]
    for r in doc["rows"]:
        u = r.get("utility") or {}
        util = f"{u['relative_gradient_error']:.3g} ({u['cosine_to_true']:.3f})" if u else r.get("error", "-")
        q = []
        for a in ("ig", "fedleak"):
            c = cells.get((r["defense"], a))
            q.append("-" if c is None else c.get("error") or f"{c['psnr']:.1f} / {c['ssim']:.2f} ({c['risk_band']})")
        lines.append(f"| {r['defense'].replace('CRITIC', 'D').replace(':formula=fedleak', '')} | {util} | {q[0]} | {q[1]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
