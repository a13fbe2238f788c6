"""FedAvg clients written to files once, then label methods run on them on any device: the CPU columns here, the
costly ones (client-fit on a BatchNorm model) on a GPU, on the very same updates.

    .venv/bin/python -m benchmarks.labels_clients write OUT --models convnet --K 2,4,8 --lr 0.01,0.05 --B 8,32 \
        --batch random,dirichlet                                  # trains the models, captures the clients (CPU)
    .venv/bin/python -m benchmarks.labels_clients run OUT --tag cpu --methods bias-count,zlg,ilrg,llg,llg-plus,rlu,auto
    python3 -m benchmarks.labels_clients run OUT --tag fit16 --methods client-fit --device cuda   # on the GPU box
    .venv/bin/python -m benchmarks.labels_clients summary OUT     # the table: every tag's columns side by side

``write`` uses benchmarks/labels_fedavg.py's models, victims and clients (the same seeds: trial t, step count K ->
generator 1000 t + K) and writes OUT/models/<model>_<state>.safetensors, OUT/clients/<n>.safetensors (the upload, as
a server records it) and OUT/clients.jsonl (each client's settings and true counts: only ``summary`` reads those).
``run`` loads each client through the session, as the CLI does (the model on ``--device``), runs the methods through
the job layer with the benchmark's 500 labelled aux digits, and appends one record per client and method to
OUT/runs/<tag>.jsonl (flushed per client, so a run stopped by a time limit keeps what it finished; a re-run skips the
clients already there). ``--options`` gives a method's options as JSON, e.g. '{"client-fit": {"per-class": 4}}'.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch

from benchmarks.labels import data, make_model, train
from benchmarks.labels_fedavg import MODELS, client_capture
from fedaudit.io.checkpoint import save_checkpoint
from fedaudit.io.update import save_update
from fedaudit.jobs.labels import LabelJob
from fedaudit.metrics.labels import counts, label_metrics
from fedaudit.session import Aux, Session

# diagnostics a run keeps beside the counts where the method reports them (bn-count's switch reads the first two;
# readings_distance: auto's agreement of two readings on the many-classes route)
KEPT_DIAGNOSTICS = ("relative_residual", "relative_change", "path_fraction", "strategy", "readings_distance")
GRID: dict[str, list] = {"K": [2, 4, 8], "lr": [0.01, 0.05], "momentum": [0.0], "B": [8, 32], "batch": ["random", "dirichlet"]}


def write(out: Path, models: list[str], grid: dict, trials: int) -> int:
    train_xy, _, pool = data()
    (out / "models").mkdir(parents=True, exist_ok=True)
    (out / "clients").mkdir(parents=True, exist_ok=True)
    n = 0
    with (out / "clients.jsonl").open("w") as index:
        for key in models:
            label, arch, kwargs, bn = MODELS[key]
            spec, model = make_model(arch, kwargs)
            for state, net in (("random init", model.eval()), ("trained", train(model, spec, train_xy, epochs=1))):
                ckpt = out / "models" / f"{key}_{state.replace(' ', '-')}.safetensors"
                save_checkpoint(ckpt, net, spec)
                for k, lr, mom, b, kind, t in itertools.product(*grid.values(), range(trials)):
                    cap, labels = client_capture(spec, net, pool, t, k, b, lr, mom, kind, bn)
                    save_update(out / "clients" / f"{n}.safetensors", cap.tensors, cap.meta)
                    index.write(json.dumps({"client": n, "checkpoint": str(ckpt.relative_to(out)), "model": label,
                                            "state": state, "K": k, "lr": lr, "momentum": mom, "B": b, "batch": kind,
                                            "trial": t, "truth": counts(labels, 10).tolist()}) + "\n")
                    n += 1
    print(f"{n} clients in {out}", file=sys.stderr)
    return 0


def run(out: Path, tag: str, methods: list[str], device: str, options: dict, limit_s: float | None,
        shard: tuple[int, int] = (0, 1), only: str | None = None, where: dict | None = None) -> int:
    _, (ax, ay), _ = data()
    aux = Aux(ax, ay, "images")
    clients = [json.loads(line) for line in (out / "clients.jsonl").read_text().splitlines()]
    # a seeded order, so that a run stopped by its time limit has clients from the whole grid
    order = torch.randperm(len(clients), generator=torch.Generator().manual_seed(0)).tolist()
    clients = [clients[i] for i in order][shard[0]::shard[1]]
    if only:  # the clients another run (OUT/runs/ONLY.jsonl, its shards ONLY.I.jsonl, or one shard ONLY.I) finished, e.g. to compare with a partial GPU run
        have = {json.loads(line)["client"] for f in (out / "runs").glob("*.jsonl") if only in (f.stem, f.stem.split(".")[0])
                for line in f.read_text().splitlines()}
        clients = [c for c in clients if c["client"] in have]
    for key, value in (where or {}).items():  # e.g. state=trained: compared as text
        clients = [c for c in clients if str(c[key]) == value]
    path = out / "runs" / (f"{tag}.jsonl" if shard[1] == 1 else f"{tag}.{shard[0]}.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {(r["client"], r["method"]) for r in map(json.loads, path.read_text().splitlines())} if path.exists() else set()
    start = time.perf_counter()
    with path.open("a") as log:
        for c in clients:
            pending = [name for name in methods if (c["client"], name) not in done]
            if not pending:
                continue
            if limit_s is not None and time.perf_counter() - start > limit_s:
                print(f"time limit: stopped before client {c['client']}", file=sys.stderr)
                return 0
            session = Session.create(device, seed=c["trial"], aux=aux)
            tm = session.load_threat_model(out / c["checkpoint"], out / "clients" / f"{c['client']}.safetensors")
            for name in pending:
                torch.manual_seed(session.seed)  # each method starts from the seed, as after its own load
                job = LabelJob(session, tm, name, options.get(name))
                why = type(job.instance).why_not(tm, session)
                rec = {"client": c["client"], "method": name, "device": str(session.device)}
                if why:
                    rec["not_applicable"] = why
                else:
                    t0 = time.perf_counter()
                    r = job.result()
                    if session.device.type == "cuda":
                        torch.cuda.synchronize()
                    rec.update(counts=r.counts_int.tolist(), s=round(time.perf_counter() - t0, 3),
                               chosen=r.diagnostics.get("chosen"), fit=r.diagnostics.get("fit"),
                               **{k: r.diagnostics[k] for k in KEPT_DIAGNOSTICS if k in r.diagnostics})
                log.write(json.dumps(rec) + "\n")
                log.flush()
            print(f"client {c['client']} done ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    return 0


def summary(out: Path, group: list[str], columns: list[str] | None = None) -> str:
    """InsAcc in % per group of settings and (tag, method) column (``columns``: those only, as TAG:METHOD), over the
    clients every column has."""
    clients = {c["client"]: c for c in map(json.loads, (out / "clients.jsonl").read_text().splitlines())}
    cols: dict[str, dict[int, float]] = {}
    secs: dict[str, list[float]] = {}
    for path in sorted((out / "runs").glob("*.jsonl")):
        for r in map(json.loads, path.read_text().splitlines()):
            if "counts" not in r:
                continue
            col = f"{path.stem.split('.')[0]}:{r['method']}"  # TAG.SHARD.jsonl files make one column
            if columns and col not in columns:
                continue
            truth = torch.tensor(clients[r["client"]]["truth"])
            cols.setdefault(col, {})[r["client"]] = 100 * label_metrics(torch.tensor(r["counts"]), truth)["InsAcc"]
            secs.setdefault(col, []).append(r["s"])
    common = sorted(set.intersection(*(set(v) for v in cols.values()))) if cols else []
    rows: dict[tuple, list[int]] = {}
    for n in common:
        rows.setdefault(tuple(clients[n][g] for g in group), []).append(n)
    names = sorted(cols)
    lines = [f"InsAcc in %, mean over the clients of each row ({len(common)} clients that every column has); "
             "seconds per client in the last line.", "",
             "| " + " | ".join(group) + " | clients | " + " | ".join(names) + " |",
             "|" + "---|" * (len(group) + 1 + len(names))]
    for key in sorted(rows, key=str):
        ns = rows[key]
        lines.append("| " + " | ".join(map(str, key)) + f" | {len(ns)} | "
                     + " | ".join(f"{sum(cols[m][n] for n in ns) / len(ns):.1f}" for m in names) + " |")
    lines.append("| all" + " |" * len(group) + f" {len(common)} | "
                 + " | ".join(f"**{sum(cols[m][n] for n in common) / max(1, len(common)):.1f}**" for m in names) + " |")
    lines.append("| seconds" + " |" * len(group) + " | "
                 + " | ".join(f"{sum(secs[m]) / len(secs[m]):.2f}" for m in names) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="train the models and capture the clients (CPU)")
    w.add_argument("out", type=Path)
    w.add_argument("--models", default="convnet", help=f"comma list of {', '.join(MODELS)}")
    for key in GRID:
        w.add_argument(f"--{key}", help=f"comma list (default {GRID[key]})")
    w.add_argument("--trials", type=int, default=1)
    r = sub.add_parser("run", help="run label methods on the written clients")
    r.add_argument("out", type=Path)
    r.add_argument("--tag", required=True, help="the run's name: OUT/runs/TAG.jsonl")
    r.add_argument("--methods", required=True)
    r.add_argument("--device", default="cpu")
    r.add_argument("--options", default="{}", help="JSON: {method: {option: value}}")
    r.add_argument("--threads", type=int, default=None)
    r.add_argument("--limit-s", type=float, default=None, help="stop starting clients after this many seconds")
    r.add_argument("--only", help="only the clients that the runs tagged ONLY have")
    r.add_argument("--where", help="only the clients with these settings, e.g. state=trained,trial=1")
    r.add_argument("--shard", default="0/1", help="I/N: every N-th client from the I-th (parallel runs; written to "
                   "OUT/runs/TAG.I.jsonl)")
    s = sub.add_parser("summary", help="the table of every run")
    s.add_argument("out", type=Path)
    s.add_argument("--by", default="state,K,lr,B,batch", help="settings that make a row")
    s.add_argument("--columns", help="comma list of TAG:METHOD columns (default: every run's)")
    args = ap.parse_args(argv)
    if args.command == "write":
        grid = {k: [type(v[0])(x) for x in getattr(args, k).split(",")] if getattr(args, k) else v
                for k, v in GRID.items()}
        return write(args.out, args.models.split(","), grid, args.trials)
    if args.command == "run":
        if args.threads:
            torch.set_num_threads(args.threads)
        i, n = (int(v) for v in args.shard.split("/"))
        return run(args.out, args.tag, args.methods.split(","), args.device, json.loads(args.options), args.limit_s,
                   (i, n), args.only, dict(kv.split("=", 1) for kv in args.where.split(",")) if args.where else None)
    table = summary(args.out, args.by.split(","), args.columns.split(",") if args.columns else None)
    (args.out / "summary.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
