"""Stored label records read against the uniform-count floor (what an even guess that reads no update scores).

    .venv/bin/python -m benchmarks.labels_floor RECORDS.jsonl [RECORDS.jsonl ...] [--by model,state,batch] [--out F.md]
    .venv/bin/python -m benchmarks.labels_floor --sizes 8,16,32,64,128,320     # the floor of random batches of N

Each RECORDS file holds one JSON line per client with its true counts (``truth``) and every method's counts and
InsAcc (``methods``), as ``benchmarks.labels_fedavg --records`` and the other label probes write them. Per group
(``--by``: record fields) it prints the mean floor (fedaudit/metrics/label_floor.py, from the true counts), the mean
InsAcc of `auto` and of the best single method (the one with the highest mean over the group, among the methods every
client of the group ran), each less the floor, on how many clients `auto` does not clear the floor, and on how many
`auto`'s counts draw the truth-free even-split warning (an even guess overlaps them by at least 0.9,
fedaudit/jobs/labels.py) with those clients' mean InsAcc above their floor, and `auto` less the best single method per
client (mean +- its standard error: a gap inside it is noise). ``--before RECORDS``: an earlier code's `auto` on the
same clients (matched by model, state, K, lr, momentum, B, batch and trial) and `auto`'s change against it per client
(mean +- standard error). No model runs.
``--sizes``: the mean floor of batches of N labels drawn uniformly from C classes (20,000 draws each, seed 0).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

import torch

from fedaudit.jobs.labels import EVEN_SPLIT_WARN
from fedaudit.metrics.label_floor import uniform_floor
from fedaudit.verdict.labels import even_split_overlap

NOT_SINGLE = ("auto", "auto-rules", "auto-evidence", "auto-ensemble")


def records(paths: list[Path]) -> list[dict]:
    """Every client with true counts in ``paths`` (lines without them, such as summaries, are skipped)."""
    out = []
    for p in paths:
        for line in p.read_text().splitlines():
            r = json.loads(line) if line.strip() else {}
            if "truth" in r and "methods" in r:
                out.append(r)
    return out


CLIENT = ("model", "state", "K", "lr", "momentum", "B", "batch", "trial")  # what names one client across runs


def _mean_se(values: list[float]) -> str:
    """'mean +- standard error' of ``values`` in points (fractions in, percentage points out)."""
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return f"{100 * statistics.mean(values):+.1f} +- {100 * se:.1f}"


def table(clients: list[dict], by: list[str], before: list[dict] | None = None) -> str:
    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    for r in clients:
        groups[tuple(r.get(k) for k in by)].append(r)
    earlier = {tuple(r.get(k) for k in CLIENT): r["methods"]["auto"]["InsAcc"] for r in before or []
               if "auto" in r["methods"]}
    extra = " auto before | auto - before (per client) |" if before is not None else ""
    lines = ["InsAcc in %, mean over clients; floor: an even guess that reads no update; 'auto at or below the floor': "
             "clients whose `auto` InsAcc does not exceed their floor; differences per client, mean +- standard error.",
             "", "| " + " | ".join(by) + " | clients | floor | auto | auto - floor | best single | best single - floor "
             "| auto - best single (per client) | auto at or below the floor | warned: clients, above the floor |"
             + extra, "|" + "---|" * (len(by) + 9 + (2 if before is not None else 0))]
    every = ("all", *[""] * (len(by) - 1))
    for key in [*sorted(groups, key=lambda k: tuple(str(v) for v in k)), every]:
        rows = groups[key] if key != every else clients
        floor = [float(uniform_floor(torch.tensor(r["truth"]))["InsAcc"]) for r in rows]
        singles = [m for m in rows[0]["methods"] if m not in NOT_SINGLE
                   and all("InsAcc" in r["methods"].get(m, {}) for r in rows)]
        best = max(singles, key=lambda m: statistics.mean(r["methods"][m]["InsAcc"] for r in rows)) if singles else None
        auto = [r["methods"]["auto"]["InsAcc"] for r in rows] if all("auto" in r["methods"] for r in rows) else None
        f = statistics.mean(floor)
        cells = [str(len(rows)), f"{100 * f:.1f}"]
        if auto:
            a = statistics.mean(auto)
            cells += [f"{100 * a:.1f}", f"{100 * (a - f):+.1f}"]
        else:
            cells += ["-", "-"]
        if best:
            b = statistics.mean(r["methods"][best]["InsAcc"] for r in rows)
            cells += [f"{100 * b:.1f} ({best})", f"{100 * (b - f):+.1f}"]
            cells.append(_mean_se([a - r["methods"][best]["InsAcc"] for a, r in zip(auto, rows)]) if auto else "-")
        else:
            cells += ["-", "-", "-"]
        cells.append(str(sum(a <= fl + 1e-9 for a, fl in zip(auto, floor))) if auto else "-")
        warned = [r["methods"]["auto"]["InsAcc"] - fl for r, fl in zip(rows, floor) if auto and "counts" in r["methods"]["auto"]
                  and (even_split_overlap(torch.tensor(r["methods"]["auto"]["counts"])) or 0) >= EVEN_SPLIT_WARN]
        cells.append(f"{len(warned)}, {100 * statistics.mean(warned):+.1f}" if warned else "0" if auto else "-")
        if before is not None:
            prior = [earlier.get(tuple(r.get(k) for k in CLIENT)) for r in rows]
            if auto and all(v is not None for v in prior):
                cells += [f"{100 * statistics.mean(prior):.1f}", _mean_se([a - v for a, v in zip(auto, prior)])]
            else:
                cells += ["-", "-"]
        lines.append("| " + " | ".join(str(v) for v in key) + " | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def random_batches(sizes: list[int], classes: int = 10, draws: int = 20_000) -> str:
    """The mean floor of batches of N labels drawn uniformly at random from ``classes`` classes."""
    g = torch.Generator().manual_seed(0)
    lines = ["| N | floor of random batches (InsAcc %) |", "|---|---|"]
    for n in sizes:
        batches = torch.multinomial(torch.ones(classes), n * draws, replacement=True, generator=g).view(draws, n)
        floors = [float(uniform_floor(torch.bincount(b, minlength=classes))["InsAcc"]) for b in batches]
        lines.append(f"| {n} | {100 * statistics.mean(floors):.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="*", type=Path)
    ap.add_argument("--sizes", help="comma list of batch sizes N: the floor of random batches instead of records")
    ap.add_argument("--by", default="model,state,batch", help="comma list of record fields to group by")
    ap.add_argument("--out", type=Path, help="also write the table here")
    ap.add_argument("--before", type=Path, nargs="+", help="records of an earlier `auto` on the same clients")
    args = ap.parse_args(argv)
    if not args.records and not args.sizes:
        ap.error("give RECORDS files or --sizes")
    text = random_batches([int(v) for v in args.sizes.split(",")]) if args.sizes else table(records(args.records), args.by.split(","),
                                                                     records(args.before) if args.before else None)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
