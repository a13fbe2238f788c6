"""How well the labels self-check (fedaudit/verdict/label_self_check.py) predicts a reading's accuracy.

    .venv/bin/python -m benchmarks.labels_self_check --models convnet --states "random init" \\
        --rows 4:0.01:0:8:random,4:0.05:0.9:8:dirichlet --clients 3 --out DIR

Each client is labels_fedavg's (the same victims, batches and seeds: ``client_update``); `auto` (or ``--method``)
reads it with ``--clients`` simulated clients per kind (the reading's counts, and even ones). Per client the record
holds the true InsAcc and floor beside the self-check's truth-free estimate and its warning; the table compares them
per model and state: the mean absolute error of the estimate, and on how many clients at or below their floor the
warning fired (and on how many above it). Writes DIR/labels_self_check.jsonl and DIR/labels_self_check.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from benchmarks.common import RESULTS
from benchmarks.labels import data, floor_of, make_model, train
from benchmarks.labels_fedavg import MODELS, client_update
from benchmarks.records import jsonl_rows
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.metrics.labels import counts, label_metrics
from fedaudit.verdict.label_self_check import near_guess

ROWS = "4:0.01:0:8:random,4:0.05:0.9:8:dirichlet"


def client_record(model: str, state: str, row: tuple, trial: int, tm, truth, aux: Aux, method: str,
                  clients: int) -> dict:
    """One client: the method's reading with its self-check, against the truth."""
    out = LabelJob(Session(seed=trial, aux=aux), tm, method, self_check=clients).run()
    true = counts(truth, 10)
    check = out["evidence"]["self_check"]
    return {"model": model, "state": state, "K": row[0], "lr": row[1], "momentum": row[2], "B": row[3],
            "batch": row[4], "trial": trial, "truth": true.tolist(), "counts": out["counts_int"],
            "InsAcc": label_metrics(torch.tensor(out["counts_int"]), true)["InsAcc"], "floor": floor_of(truth)["InsAcc"],
            "chosen": out["diagnostics"].get("chosen"), "self_check": check,
            "warned": bool(check.get("near_guess"))}


FIELDS = ["model", "state", "K", "lr", "momentum", "B", "batch"]


def table(records: list[dict], by: list[str] = FIELDS) -> str:
    lines = ["InsAcc in %, mean over clients. est: the self-check's estimate (the method on clients simulated with its "
             "reading's counts); even: the method on simulated even clients, less their floor; |est - true|: mean "
             "absolute error; warned: clients whose self-check warned (reading near a guess), of those at or below "
             "their true floor / above it (the current rule, re-read from the stored simulated readings).", "",
             "| " + " | ".join(by) + " | clients | true | floor | est | est floor | even - floor "
             "| abs(est - true) | warned: at or below floor | warned: above floor | warned: over 10 above floor |",
             "|---" * (len(by) + 10) + "|"]
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(tuple(r[f] for f in by), []).append(r)
    for r in records:  # the current rule on the stored simulated readings
        r["warned"] = bool(r["self_check"].get("clients") and near_guess(r["self_check"]))
    for key, rows in list(groups.items()) + [(("all",) + ("",) * (len(by) - 1), records)]:
        done = [r for r in rows if r["self_check"].get("clients")]
        if not done:
            continue
        def m(f, done=done) -> float:
            return 100 * statistics.mean(f(r) for r in done)

        low = [r for r in done if r["InsAcc"] <= r["floor"]]
        high = [r for r in done if r["InsAcc"] > r["floor"]]
        clear = [r for r in done if r["InsAcc"] > r["floor"] + 0.1]
        lines.append("| " + " | ".join(str(v) for v in key) + f" | {len(done)} | {m(lambda r: r['InsAcc']):.1f} | "
                     f"{m(lambda r: r['floor']):.1f} | {m(lambda r: r['self_check']['InsAcc']):.1f} | "
                     f"{m(lambda r: r['self_check']['floor']):.1f} | "
                     f"{m(lambda r: r['self_check']['even']['above_floor']):+.1f} | "
                     f"{m(lambda r: abs(r['self_check']['InsAcc'] - r['InsAcc'])):.1f} | "
                     f"{sum(r['warned'] for r in low)} of {len(low)} | {sum(r['warned'] for r in high)} of {len(high)} | "
                     f"{sum(r['warned'] for r in clear)} of {len(clear)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="convnet", help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--states", default="random init")
    ap.add_argument("--rows", default=ROWS, help="comma list of K:lr:momentum:B:batch")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--first-trial", type=int, default=3)
    ap.add_argument("--clients", type=int, default=3, help="simulated clients per kind")
    ap.add_argument("--method", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS / "labels_self_check")
    ap.add_argument("--table", nargs="*", type=Path, help="only print the table of these records files")
    ap.add_argument("--by", default=",".join(FIELDS), help="comma list of the fields a table row groups by")
    args = ap.parse_args(argv)
    if args.table:
        records = jsonl_rows(*args.table)
        print(table(records, args.by.split(",")), end="")
        return 0
    torch.set_num_threads(args.threads)
    train_xy, (ax, ay), (px, py) = data()
    aux = Aux(ax, ay, "images")
    rows = [(int(k), float(lr), float(m), int(b), kind) for k, lr, m, b, kind in
            (r.split(":") for r in args.rows.split(","))]
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    with (args.out / "labels_self_check.jsonl").open("w") as f:
        for key in args.models.split(","):
            label, arch, kwargs, bn = MODELS[key]
            spec, model = make_model(arch, kwargs)
            for state in args.states.split(","):
                net = model.eval() if state == "random init" else train(model, spec, train_xy, epochs=1)
                for row in rows:
                    for t in range(args.first_trial, args.first_trial + args.trials):
                        k, lr, mom, b, kind = row
                        tm, truth = client_update(spec, net, (px, py), t, k, b, lr, mom, kind, bn)
                        rec = client_record(label, state, row, t, tm, truth, aux, args.method, args.clients)
                        records.append(rec)
                        f.write(json.dumps(rec) + "\n")
                        f.flush()
                        print(json.dumps({k: rec[k] for k in ("model", "state", "K", "lr", "B", "batch", "InsAcc",
                                                              "floor", "warned")}), file=sys.stderr, flush=True)
    text = table(records)
    (args.out / "labels_self_check.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
