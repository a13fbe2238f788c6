"""Held-out check of ``auto``'s route for FedAvg deltas of models above CLIENT_FIT_MAX_PARAMETERS (no batch-statistics
BatchNorm): RLU where its least squares leaves less than RLU_MAX_RESIDUAL of the update's norm, else the plain
ensemble. Both constants were set on the LeNets (6-62 thousand parameters, MNIST); the models that take this route in
practice are larger: a wide MLP, AlexNet and VGG16 (random init and their published ImageNet feature stacks).

    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_large_deltas --models mlp-wide,alexnet,vgg16
    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_large_deltas --models mlp-wide --client-fit
    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_large_deltas --models lenet,flower-cnn --states "random init,trained" \
        --size-cap 0
    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_large_deltas --summary OUT/labels_large_deltas.jsonl

Clients: UCI digits (scikit-learn; an image source neither constant saw; three channels for the ImageNet stacks), K =
4 local SGD steps at lr 0.01, B 8 and 32, random and Dirichlet(0.5) batches, trials 0-3, at random init, at the
published weights (the ImageNet stacks: a fresh head on the pretrained features, as fine-tuning starts) and trained
(from the published weights where there are some). Each client is read by ``auto`` as shipped, with RLU
always kept (RLU_MAX_RESIDUAL infinite) and never kept (the ensemble: RLU is one of its members), and with
``--client-fit`` with CLIENT_FIT_MAX_PARAMETERS lifted (client-fit runs; its seconds recorded). ``--size-cap 0`` sends
smaller models (the DLG LeNet, Flower's CNN) through the same route, where RLU's residual can be small. Writes
OUT/labels_large_deltas[_size_cap<N>].jsonl (one line per client, appended) and prints InsAcc per reading with paired
differences to the shipped one (docs/results/labels.md, "Deltas of models above client-fit's size").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch

from benchmarks.common import RESULTS
from benchmarks.labels import data, train
from benchmarks.labels_fedavg import client_update
from benchmarks.records import jsonl_rows
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.labels.auto_routes import delta
from fedaudit.metrics.labels import counts, label_metrics
from fedaudit.models import ModelSpec
from fedaudit.models.build import initial_model

# (architecture, kwargs, input channels, training epochs on 1,000 digits)
MODELS = {"mlp-wide": ("mlp", {"hidden": [1024, 1024]}, 1, 8),
          "alexnet": ("alexnet-imagenet", {}, 3, 2),
          "vgg16": ("vgg16-imagenet", {}, 3, 1),
          # below client-fit's size: read through the route above it with --size-cap 0 (where RLU's residual is small)
          "lenet": ("lenet", {}, 1, 40),
          "flower-cnn": ("flower-cnn", {}, 1, 8)}
READINGS = {"shipped": {}, "rlu": {"RLU_MAX_RESIDUAL": float("inf")}, "ensemble": {"RLU_MAX_RESIDUAL": -1.0},
            "client-fit": {"CLIENT_FIT_MAX_PARAMETERS": 10**12}}
# random init; the published weights (the ImageNet stacks: their feature stack, a fresh head; skipped elsewhere); trained
# on the digits from the published weights where there are some, else from random init
STATES = ("random init", "pretrained", "trained")
K, LR = 4, 0.01


def channels(xy: tuple[torch.Tensor, torch.Tensor], c: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (xy[0].repeat(1, c, 1, 1), xy[1])


def read(tm, truth: torch.Tensor, seed: int, aux: Aux, constants: dict) -> dict:
    """``auto``'s reading of one client with ``constants`` of fedaudit.labels.auto_routes.delta set for the run."""
    with mock.patch.multiple(delta, **constants):
        t0 = time.perf_counter()
        r = LabelJob(Session(seed=seed, aux=aux), tm, "auto").result()
        seconds = time.perf_counter() - t0
    d = r.diagnostics
    return {"InsAcc": label_metrics(r.counts_int, truth)["InsAcc"], "counts": r.counts_int.tolist(),
            "route": d.get("route"), "strategy": d.get("strategy"), "spread": d.get("softmax_spread"),
            "rlu_residual": d.get("rlu_residual"), "seconds": round(seconds, 2)}


def read_all(tm, truth: torch.Tensor, seed: int, aux: Aux, names: list[str]) -> dict:
    """Every reading of one client. The constants act only where ``auto`` took its client-fit route on outputs that
    depend on the input (else RLU's input-independent route answers first): elsewhere the other readings are the
    shipped one, not rerun (``same``)."""
    shipped = read(tm, truth, seed, aux, READINGS["shipped"])
    acts = shipped["route"] == "client-fit" and (shipped["spread"] or 0.0) >= delta.INPUT_INDEPENDENT
    return {"shipped": shipped, **{n: read(tm, truth, seed, aux, READINGS[n]) if acts else {**shipped, "same": True}
                                   for n in names if n != "shipped"}}


def summary(rows: list[dict]) -> str:
    """InsAcc per reading over the clients the constants act on, and its paired difference to the shipped reading
    (mean +- SE)."""
    names = [n for n in READINGS if any(n in r["readings"] for r in rows)]
    acted = [r for r in rows if not any(v.get("same") for v in r["readings"].values())]
    lines = [f"{len(acted)} of {len(rows)} clients took the route the constants act on",
             "| reading | clients | InsAcc | vs shipped | higher / lower | seconds (median) |",
             "|---|---|---|---|---|---|"]
    if not acted:
        return lines[0]
    for name in names:
        rows = [r for r in acted if name in r["readings"]]  # client-fit's reading: only where it was asked for
        if not rows:
            continue
        diff = [r["readings"][name]["InsAcc"] - r["readings"]["shipped"]["InsAcc"] for r in rows]
        se = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else 0.0
        acc = statistics.mean(r["readings"][name]["InsAcc"] for r in rows)
        secs = statistics.median(r["readings"][name]["seconds"] for r in rows)
        lines.append(f"| {name} | {len(rows)} | {100 * acc:.1f}% | {100 * statistics.mean(diff):+.1f} +- {100 * se:.1f} "
                     f"| {sum(d > 0 for d in diff)} / {sum(d < 0 for d in diff)} | {secs:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp-wide,alexnet,vgg16")
    ap.add_argument("--states", default=",".join(STATES))
    ap.add_argument("--B", default="8,32")
    ap.add_argument("--batches", default="random,dirichlet")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--client-fit", action="store_true", help="also read each client with client-fit's size lifted")
    ap.add_argument("--size-cap", type=int, help="CLIENT_FIT_MAX_PARAMETERS for every reading but client-fit's (0: "
                    "every model takes the route above client-fit's size)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--summary", type=Path, help="print the summary of a stored JSONL file and exit")
    args = ap.parse_args(argv)
    if args.summary:
        print(summary(jsonl_rows(args.summary)))
        return 0
    torch.set_num_threads(args.threads)
    readings = [n for n in READINGS if n != "client-fit" or args.client_fit]
    if args.size_cap is not None:
        for name in ("shipped", "rlu", "ensemble"):
            READINGS[name] = {**READINGS[name], "CLIENT_FIT_MAX_PARAMETERS": args.size_cap}
    train_xy, aux_xy, pool_xy = data(dataset="digits")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    name = "labels_large_deltas" + ("" if args.size_cap is None else f"_size_cap{args.size_cap}")
    with (args.out / f"{name}.jsonl").open("a") as f:
        for key in args.models.split(","):
            arch, kwargs, c, epochs = MODELS[key]
            spec = ModelSpec(arch, 10, (c, 32, 32), (0.5,) * c, (0.5,) * c, kwargs)
            torch.manual_seed(0)
            random_init = initial_model(spec, pretrained=False)[0].eval()
            torch.manual_seed(0)
            published, source = initial_model(spec)
            published = None if source == "random init" else published.eval()
            aux = Aux(*channels(aux_xy, c), "images")
            pool = channels(pool_xy, c)
            for state in args.states.split(","):
                if state == "random init":
                    net = random_init
                elif state == "pretrained":
                    if published is None:
                        continue
                    net = published
                else:
                    net = train(random_init if published is None else published, spec, channels(train_xy, c), epochs)
                for b in [int(v) for v in args.B.split(",")]:
                    for kind in args.batches.split(","):
                        for t in range(args.trials):
                            tm, labels = client_update(spec, net, pool, t, K, b, LR, 0.0, kind, "eval")
                            truth = counts(labels, 10)
                            row = {"model": key, "parameters": sum(p.numel() for p in net.parameters()),
                                   "size_cap": args.size_cap,
                                   "state": state, "K": K, "B": b, "batch": kind, "trial": t,
                                   "truth": truth.tolist(),
                                   "readings": read_all(tm, truth, t, aux, readings)}
                            rows.append(row)
                            f.write(json.dumps(row) + "\n")
                            f.flush()
                print(f"{key} {state}: done", file=sys.stderr, flush=True)
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
