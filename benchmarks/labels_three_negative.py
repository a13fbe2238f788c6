"""Trained models' one-step updates whose output bias gradient has exactly three negative entries: which method
counts them, and the truth-free feature `auto` routes them by (docs/results/labels.md, "Three negative entries").

    .venv/bin/python -m benchmarks.labels_three_negative      # about 9 minutes on 2 cores

The trained models of benchmarks/labels.py (FEDSGD_MODELS; DLG LeNet, PyTorch-init LeNet, ConvNet, ResNet-10), its
random and repeated (60/30/10) batches of B = 8-64 drawn with its seeds: trials 0-3 are the main table's batches,
4-11 new ones. For every batch with three negative entries: InsAcc of bias-count, LLG, RLU, `auto --strategy
evidence` (the earlier route for these batches) and `auto`, and the share of the batch that bias-count puts on the
classes with a positive entry (``share``; `auto` takes bias-count above INVISIBLE_SHARE, LLG below). Writes
OUT/labels_three_negative.jsonl (one line per batch, every batch's number of negative entries) and prints the
summary.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch

from benchmarks.common import RESULTS, threat_model
from benchmarks.labels import FEDSGD_MODELS, GRADIENT_MODELS, batch_indices, data, make_model, train
from fedaudit.client.capture import CaptureConfig
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.labels.auto_routes.calibration import INVISIBLE_SHARE
from fedaudit.metrics.labels import counts, label_metrics

METHODS = ("bias-count", "llg", "rlu", "evidence", "auto")  # evidence: `auto --strategy evidence`, the earlier route
DISTS = ["random", "repeated", "single"]  # benchmarks/labels.py's order (its seeds use the index)


def rows_for(key: str, trials: int, train_xy, aux: Aux, pool) -> list[dict]:
    px, py = pool
    label, arch, kwargs, _, epochs = FEDSGD_MODELS[key]
    spec, init = make_model(arch, kwargs)
    model = train(init, spec, train_xy, epochs)
    rows = []
    for dist in ("random", "repeated"):
        for b in (8, 16, 32, 64):
            g = torch.Generator().manual_seed(1000 * b + DISTS.index(dist))
            for t in range(trials):
                idx = batch_indices(py, b, dist, g)
                tm = threat_model(spec, model, px[idx], py[idx], CaptureConfig(batch_size=b, bn_mode="train"))
                gb = tm.final_bias_grad
                row = {"model": key, "dist": dist, "B": b, "trial": t, "negative": int((gb < 0).sum())}
                if row["negative"] == 3:
                    truth = counts(py[idx], 10)
                    found = {m: LabelJob(Session(seed=t, aux=aux), tm, *(("auto", {"strategy": "evidence"}) if m == "evidence"
                                                                          else (m, {}))).result() for m in METHODS}
                    row.update({"InsAcc": {m: label_metrics(r.counts_int, truth)["InsAcc"] for m, r in found.items()},
                                "share": found["auto"].diagnostics["bias_count_share_on_positive"],  # what auto routed by
                                "auto_route": found["auto"].diagnostics["strategy"]})
                rows.append(row)
    return rows


def summary(rows: list[dict]) -> str:
    three = [r for r in rows if r["negative"] == 3]
    lines = [f"{len(three)} of {len(rows)} batches have three negative entries; InsAcc in % (batches)", "",
             "| model | batch | trials | n | " + " | ".join(METHODS) + " |", "|---|---|---|---|" + "---|" * len(METHODS)]
    groups = collections.defaultdict(list)
    for r in three:
        groups[(r["model"], r["dist"], "0-3" if r["trial"] < 4 else "4+")].append(r)
        groups[("all", r["dist"], "0-3" if r["trial"] < 4 else "4+")].append(r)
        groups[("all", "all", "all")].append(r)
    for (model, dist, trials), rs in groups.items():
        mean = {m: 100 * sum(r["InsAcc"][m] for r in rs) / len(rs) for m in METHODS}
        lines.append(f"| {model} | {dist} | {trials} | {len(rs)} | " + " | ".join(f"{mean[m]:.1f}" for m in METHODS) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(GRADIENT_MODELS), help="keys of benchmarks.labels.FEDSGD_MODELS")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    train_xy, (ax, ay), pool = data()
    aux = Aux(ax, ay, "images")
    rows = [r for key in args.models.split(",") for r in rows_for(key, args.trials, train_xy, aux, pool)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "labels_three_negative.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"auto: bias-count where share > {INVISIBLE_SHARE}, else LLG\n\n" + summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
