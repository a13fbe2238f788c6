"""Held-out check of SPLIT_MAX_FIT (``auto`` keeps sample-split's answer where its fit is at most this): on batches
the threshold was not chosen on (another image source, other batches), each batch is read twice by ``auto``, once as
shipped and once with sample-split never kept, so that any threshold's reading of the batch is known: sample-split's
answer where its fit is at most the threshold, the route below it otherwise.

    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_split_threshold --data digits --batch-seed 2

The threshold was chosen on benchmarks.labels' main table (MNIST, batch seed 0): final fits 1e-9 to 1e-4, failed
searches 1e-2 to 1e-1. Writes OUT/labels_split_threshold_<data>_batches<N>.jsonl (one line per batch) and prints
InsAcc per threshold with the paired difference to the shipped one (docs/results/labels.md, "sample-split").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from benchmarks.common import RESULTS, threat_model
from benchmarks.labels import DISTS, FEDSGD_MODELS, cell_batches, data, make_model, train
from fedaudit.client.capture import CaptureConfig
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.labels.auto_routes import split
from fedaudit.labels.auto_routes.calibration import SPLIT_MAX_FIT
from fedaudit.metrics.labels import counts, label_metrics

THRESHOLDS = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, float("inf"))


def read_twice(tm, truth, seed: int, aux: Aux) -> dict:
    """auto as shipped, and auto with sample-split's answer never kept (the route below it)."""
    session = Session(seed=seed, aux=aux)
    shipped = LabelJob(session, tm, "auto").result()
    row = {"chosen": shipped.diagnostics["chosen"], "fit": shipped.diagnostics.get("fit"),
           "shipped": label_metrics(shipped.counts_int, truth)["InsAcc"]}
    if row["chosen"] != "sample-split":
        return row
    keep = split.SPLIT_MAX_FIT
    split.SPLIT_MAX_FIT = -1.0  # never kept
    try:
        below = LabelJob(session, tm, "auto").result()
    finally:
        split.SPLIT_MAX_FIT = keep
    row.update(below=label_metrics(below.counts_int, truth)["InsAcc"], below_chosen=below.diagnostics["chosen"])
    return row


def summary(rows: list[dict]) -> str:
    """InsAcc per threshold over the batches sample-split answered, and the paired difference to SPLIT_MAX_FIT."""
    split_rows = [r for r in rows if r["chosen"] == "sample-split"]
    if not split_rows:
        return "no batch went to sample-split"

    def reading(r, t):
        return r["shipped"] if r["fit"] <= t else r["below"]

    lines = [f"{len(split_rows)} of {len(rows)} batches went to sample-split (fits {min(r['fit'] for r in split_rows):.1e}"
             f" .. {max(r['fit'] for r in split_rows):.1e})", "| threshold | kept | InsAcc | vs shipped |", "|---|---|---|---|"]
    for t in THRESHOLDS:
        diff = torch.tensor([reading(r, t) - reading(r, SPLIT_MAX_FIT) for r in split_rows], dtype=torch.float64)
        se = float(diff.std() / len(diff) ** 0.5) if len(diff) > 1 else 0.0
        acc = sum(reading(r, t) for r in split_rows) / len(split_rows)
        kept = sum(r["fit"] <= t for r in split_rows)
        lines.append(f"| {t:g} | {kept} | {100 * acc:.1f}% | {100 * float(diff.mean()):+.1f} +- {100 * se:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", choices=["mnist", "digits"], default="digits")
    ap.add_argument("--batch-seed", type=int, default=2)
    ap.add_argument("--models", default="lenet,lenet-torch,convnet,resnet10")
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--summary", type=Path, help="print the summary of a stored JSONL file and exit")
    args = ap.parse_args(argv)
    if args.summary:
        print(summary([json.loads(line) for line in args.summary.read_text().splitlines()]))
        return 0
    torch.set_num_threads(2)
    train_xy, (ax, ay), (px, py) = data(dataset=args.data)
    epoch_scale = round(3500 / len(train_xy[1]))
    aux = Aux(ax, ay, "images")
    path = args.out / f"labels_split_threshold_{args.data}_batches{args.batch_seed}.jsonl"
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with path.open("w") as f:
        for key in args.models.split(","):
            label, arch, kwargs, head_init, epochs = FEDSGD_MODELS[key]
            spec, init_model = make_model(arch, kwargs, head_init=head_init)
            model = train(init_model, spec, train_xy, epochs * epoch_scale)
            for dist in DISTS:
                for t, idx in enumerate(cell_batches(py, args.B, dist, args.trials, args.batch_seed)):
                    tm = threat_model(spec, model, px[idx], py[idx], CaptureConfig(batch_size=args.B, bn_mode="train"))
                    row = {"model": label, "dist": dist, "trial": t, **read_twice(tm, counts(py[idx], 10), t, aux)}
                    rows.append(row)
                    f.write(json.dumps(row) + "\n")
                    f.flush()
            print(f"{label}: done", file=sys.stderr, flush=True)
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
