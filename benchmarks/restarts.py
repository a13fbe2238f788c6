"""Restarts one after another against restarts as one stacked batch (fedaudit/attacks/batched_restarts.py).

    .venv/bin/python -m benchmarks.restarts                # one CPU thread, ~5 min
    .venv/bin/python -m benchmarks.restarts --device cuda  # on a GPU
    .venv/bin/python -m benchmarks.restarts --quick

IG on the same seeded random-init model and FedSGD gradient of the first B CIFAR-10 images (foolbox's samples),
true labels, its defaults except the budget. For each R: the whole run's wall-clock time with ``--restart-batch 1``
(sequential) and ``R`` (one batch), as a multiple of one restart's run, and whether both picked the same best restart
with the same gradient distance. Interleaved, median of the rounds. The issue's GPU target: 8 restarts <= 1.5x one.
Writes benchmarks/results/restarts.md and restarts.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, cifar_update, sync, write_results
from fedaudit.jobs import ReconstructJob, Session

CASES = (("lenet", 1, 100, (1, 8, 32)), ("resnet18", 4, 6, (1, 8)))  # (architecture, B, iterations, restart counts)


def run(tm, labels, iterations, restarts, restart_batch, device):
    job = ReconstructJob(Session(seed=0, device=device), tm, "ig", {},
                         {"iterations": iterations, "restarts": restarts, "restart-batch": restart_batch},
                         given_labels=labels)
    attack = job.build(labels)
    sync(device)
    t0 = time.perf_counter()
    result = job.optimize(attack, labels)
    sync(device)
    return time.perf_counter() - t0, result


def _cell(row: dict, mode: str) -> str:
    return f"{row[mode]['s']:.2f} s ({row[mode]['x_one']:.2f}x one)" if mode in row else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for arch, b, iterations, counts in CASES[:1] if args.quick else CASES:
        _, _, _, labels, tm = cifar_update(arch, b)
        run(tm, labels, 2, 2, 0, args.device)  # warm-up: not timed
        times: dict[tuple[int, str], list[float]] = {}
        same = {}
        for _ in range(args.rounds):
            for r in counts:
                for mode, rb in (("sequential", 1), ("batched", r)):  # r: one batch even where the default would not
                    if r == 1 and mode == "batched":
                        continue
                    t, res = run(tm, labels, iterations, r, rb, args.device)
                    times.setdefault((r, mode), []).append(t)
                    same.setdefault(r, {})[mode] = (res.best_restart, res.distance)
                print(f"{arch} B={b} R={r}: " + ", ".join(f"{m} {v[-1]:.2f} s" for (rr, m), v in times.items() if rr == r),
                      file=sys.stderr, flush=True)
        one = statistics.median(times[(1, "sequential")])
        for r in counts:
            row = {"arch": arch, "B": b, "iterations": iterations, "restarts": r, "one_restart_s": one}
            for mode in ("sequential", "batched"):
                if (r, mode) in times:
                    row[mode] = {"s": statistics.median(times[(r, mode)]), "all": times[(r, mode)],
                                 "x_one": statistics.median(times[(r, mode)]) / one}
            if r > 1:
                (bs, ds), (bb, db) = same[r]["sequential"], same[r]["batched"]
                row["same_best_restart"] = bs == bb
                row["distance_rel_diff"] = abs(ds - db) / max(abs(ds), 1e-30)
            rows.append(row)
    lines = ["| case | R | sequential | batched | same best restart |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arch']} B = {r['B']}, {r['iterations']} it | {r['restarts']} | {_cell(r, 'sequential')} | "
                     f"{_cell(r, 'batched')} | {r.get('same_best_restart', '-')} |")
    write_results(args.out, "restarts", {"rows": rows, "device": args.device, "threads": 1, "torch": torch.__version__},
                  "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
