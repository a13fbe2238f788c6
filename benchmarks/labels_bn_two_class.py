"""Two-class batches: the risk of `auto`'s one-class routes (docs/results/labels.md, "BN statistics" and "One class
without BN buffers").

    .venv/bin/python -m benchmarks.labels_bn_two_class                      # about 5 minutes on 2 cores
    .venv/bin/python -m benchmarks.labels_bn_two_class --models lenet,lenet-torch,convnet,resnet10 --no-buffers

The trained models of benchmarks/labels.py (default: the ConvNet of width 16); one-step gradient uploads, with the
clients' BN buffers (default) or without (``--no-buffers``: the route that reads LLG instead of bn-count); two-class
batches (``benchmarks.labels_fedavg.victims``) with the first class's share 0.5, 0.75 and 0.9, B = 8, 16, 32,
``--trials`` (4) each. InsAcc of bn-count (with buffers), LLG, RLU, HFGI and `auto`, and which route `auto` took.
Writes OUT/labels_bn_two_class.jsonl, or OUT/labels_two_class_no_buffers.jsonl (``--no-buffers``); OUT defaults to
benchmarks/results.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch

from benchmarks.common import RESULTS, threat_model
from benchmarks.labels import FEDSGD_MODELS, GRADIENT_MODELS, data, make_model, run_methods, train
from benchmarks.labels_fedavg import victims
from fedaudit.client.capture import CaptureConfig
from fedaudit.jobs import Aux


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="convnet", help=f"comma list of {', '.join(GRADIENT_MODELS)}")
    ap.add_argument("--no-buffers", action="store_true", help="gradient uploads without the BN buffers")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--out", type=Path, default=RESULTS, help="the folder for the results")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    train_xy, (ax, ay), (px, py) = data()
    aux = Aux(ax, ay, "images")
    methods = ["llg", "rlu", "hfgi", "auto"] if args.no_buffers else ["bn-count", "llg", "rlu", "hfgi", "auto"]
    rows = []
    for key in args.models.split(","):
        if key not in GRADIENT_MODELS:
            ap.error(f"--models: {key!r} is not one of {', '.join(GRADIENT_MODELS)}")
        label, arch, kwargs, _, epochs = FEDSGD_MODELS[key]
        spec, init = make_model(arch, kwargs)
        model = train(init, spec, train_xy, epochs)
        for share in (0.5, 0.75, 0.9):
            for b in (8, 16, 32):
                acc: dict[str, list[float]] = collections.defaultdict(list)
                routes: collections.Counter = collections.Counter()
                for t in range(args.trials):
                    idx = victims(py, b, "two-class", torch.Generator().manual_seed(100 * t + b), share=share)
                    cfg = CaptureConfig(batch_size=b, bn_mode="train", include_buffers=None if args.no_buffers else True)
                    tm = threat_model(spec, model, px[idx], py[idx], cfg)
                    res = run_methods(tm, py[idx], aux, seed=t, methods=methods)
                    for name, r in res.items():
                        acc[name].append(r["InsAcc"])
                    routes[res["auto"]["strategy"]] += 1
                row = {"share": share, "B": b, "InsAcc": {k: sum(v) / len(v) for k, v in acc.items()},
                       "auto_routes": dict(routes)}
                if args.models != "convnet" or args.no_buffers:
                    row = {"model": label, "buffers": not args.no_buffers, **row}
                rows.append(row)
                print(json.dumps(row), flush=True)
    name = "labels_two_class_no_buffers.jsonl" if args.no_buffers else "labels_bn_two_class.jsonl"
    out = args.out / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
