"""Time per iteration of each optimisation attack against Inverting Gradients, on the same captured updates.

    .venv/bin/python -m benchmarks.attack_cost            # one CPU thread, ~4 min
    .venv/bin/python -m benchmarks.attack_cost --quick    # LeNet B = 1 only

The same seeded random-init model and FedSGD gradient of the first B real CIFAR-10 images (foolbox's samples) go
to every attack with the true labels; each runs its own defaults except the budget (a few iterations: set-up and
scoring are included, so short runs slightly overstate the cost). Rounds are interleaved attack by attack, so a slow
moment of the machine hits every attack. Reported: median seconds per iteration, the ratio to IG's, and the multiple
of one plain forward + backward of the batch. The issue's target: FedLeak <= 2.0x IG at B = 16 on the ResNet
(FedLeak differentiates D twice per iteration, at x' and at the look-ahead x' + phi, so 2x is its floor).
Writes benchmarks/results/attack_cost.md and attack_cost.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, cifar_update, forward_backward_seconds, write_results
from fedaudit.jobs import ReconstructJob, Session

CASES = (("lenet", 1, 60), ("resnet18", 4, 8), ("resnet18", 16, 6))  # (architecture, B, iterations per run)
ATTACKS = ("ig", "fedleak", "fedleak-dip", "hfgi", "gradinversion")


def seconds_per_iteration(tm, attack: str, labels: list[int], iterations: int) -> float:
    job = ReconstructJob(Session(seed=0), tm, attack, {}, {"iterations": iterations, "restarts": 1}, given_labels=labels)
    built = job.build(labels)
    t0 = time.perf_counter()
    job.optimize(built, labels)
    return (time.perf_counter() - t0) / iterations


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--attacks", default=",".join(ATTACKS), help="comma list (ig is always timed: the reference)")
    ap.add_argument("--cases", help="comma list of ARCH:B, e.g. resnet18:16 (default: all)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    attacks = ["ig"] + [a for a in args.attacks.split(",") if a != "ig"]
    cases = CASES[:1] if args.quick else CASES
    if args.cases:
        cases = tuple(c for c in CASES if f"{c[0]}:{c[1]}" in args.cases.split(","))
    rows = []
    for arch, b, iterations in cases:
        spec, model, x, labels, tm = cifar_update(arch, b)
        fb = forward_backward_seconds(model, spec, x, torch.tensor(labels), repeats=5, warmup=1)
        times: dict[str, list[float]] = {a: [] for a in attacks}
        for a in attacks:  # warm-up (first-call allocations, lazy imports): not timed
            seconds_per_iteration(tm, a, labels, 2)
        for r in range(args.rounds):
            for a in attacks:
                times[a].append(seconds_per_iteration(tm, a, labels, iterations))
            print(f"{arch} B={b} round {r}: " + ", ".join(f"{a} {v[-1] * 1000:.1f} ms" for a, v in times.items()),
                  file=sys.stderr, flush=True)
        med = {a: statistics.median(v) for a, v in times.items()}
        rows.append({"arch": arch, "B": b, "iterations": iterations, "forward_backward_s": fb, "s_per_iter": med,
                     "all": times, "ratio_to_ig": {a: med[a] / med["ig"] for a in attacks}})
    lines = ["| case | " + " | ".join(attacks) + " |", "|---|" + "---|" * len(attacks)]
    for r in rows:
        lines.append(f"| {r['arch']} B = {r['B']} | " + " | ".join(
            f"{r['s_per_iter'][a] * 1000:.1f} ms ({r['ratio_to_ig'][a]:.2f}x IG, {r['s_per_iter'][a] / r['forward_backward_s']:.1f} fb)"
            for a in attacks) + " |")
    write_results(args.out, "attack_cost", {"rows": rows, "threads": 1, "torch": torch.__version__}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
