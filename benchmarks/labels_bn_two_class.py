"""Two-class batches with BN buffers: the risk of `auto`'s one-class route (docs/results/labels.md, "BN statistics").

    .venv/bin/python -m benchmarks.labels_bn_two_class     # about 5 minutes on 2 cores

The trained ConvNet (width 16) of benchmarks/labels.py; one-step gradient uploads with the clients' BN buffers;
two-class batches (``benchmarks.labels_fedavg.victims``) with the first class's share 0.5, 0.75 and 0.9, B = 8,
16, 32, 4 trials. InsAcc of bn-count, LLG, RLU, HFGI and `auto`, and which route `auto` took.
Writes benchmarks/results/labels_bn_two_class.jsonl.
"""

from __future__ import annotations

import collections
import json
import sys

import torch

from benchmarks.common import RESULTS, threat_model
from benchmarks.labels import data, make_model, run_methods, train
from benchmarks.labels_fedavg import victims
from fedaudit.client.capture import CaptureConfig
from fedaudit.jobs import Aux

METHODS = ["bn-count", "llg", "rlu", "hfgi", "auto"]


def main() -> int:
    torch.set_num_threads(2)
    train_xy, (ax, ay), (px, py) = data()
    aux = Aux(ax, ay, "images")
    spec, init = make_model("convnet", {"width": 16})
    model = train(init, spec, train_xy, 2)
    rows = []
    for share in (0.5, 0.75, 0.9):
        for b in (8, 16, 32):
            acc: dict[str, list[float]] = collections.defaultdict(list)
            routes: collections.Counter = collections.Counter()
            for t in range(4):
                idx = victims(py, b, "two-class", torch.Generator().manual_seed(100 * t + b), share=share)
                cfg = CaptureConfig(batch_size=b, bn_mode="train", include_buffers=True)
                tm = threat_model(spec, model, px[idx], py[idx], cfg)
                res = run_methods(tm, py[idx], aux, seed=t, methods=METHODS)
                for name, r in res.items():
                    acc[name].append(r["InsAcc"])
                routes[res["auto"]["strategy"]] += 1
            row = {"share": share, "B": b, "InsAcc": {k: sum(v) / len(v) for k, v in acc.items()}, "auto_routes": dict(routes)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    (RESULTS / "labels_bn_two_class.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
