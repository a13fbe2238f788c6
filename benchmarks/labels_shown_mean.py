"""`auto`'s two-step split of a BN model's shown classes, against the BN reading alone, on the same clients.

Where a FedAvg delta of K <= SHOWN_MEAN_STEPS steps of a model with batch-statistics BatchNorm shows at most
FEW_SHOWN classes, `auto` splits them by the mean of bn-count's reading and bias-count's counts projected onto them,
and records both in ``diagnostics.shown_classes`` (``bn_reading``: the earlier answer; ``bias_count``). This reads
``benchmarks.labels_fedavg --records`` runs of `auto` and prints, per model, state, batch kind and K, the clients the
mean was taken on, the BN reading's InsAcc and `auto`'s, and the paired difference with its standard error (clients
where it was not taken are counted apart: their answer is unchanged).

    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_shown_mean RECORDS.jsonl [...]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

import torch

from fedaudit.metrics.labels import label_metrics


def _insacc(counts: list[int], truth: list[int]) -> float:
    return float(label_metrics(torch.tensor(counts), torch.tensor(truth))["InsAcc"])


def table(paths: list[Path]) -> str:
    """The markdown table of the module docstring, with a last row over every client the mean was taken on."""
    taken: dict[tuple, list[tuple[float, float]]] = collections.defaultdict(list)
    left: collections.Counter = collections.Counter()
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            auto, key = r["methods"]["auto"], (r["model"], r["state"], r["batch"], r["K"])
            shown = auto.get("shown_classes") or {}
            if "bias_count" in shown:
                taken[key].append((_insacc(shown["bn_reading"], r["truth"]), auto["InsAcc"]))
            else:
                left[key] += 1
    lines = ["| model | state | batch | K | clients (mean taken / not) | BN reading | `auto` | difference |",
             "|---|---|---|---|---|---|---|---|"]

    def row(label: str, pairs: list[tuple[float, float]], rest: int) -> str:
        diff = [100 * (now - before) for before, now in pairs]
        se = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else float("nan")
        return (f"| {label} | {len(pairs)} / {rest} | {100 * statistics.mean(b for b, _ in pairs):.1f} | "
                f"{100 * statistics.mean(n for _, n in pairs):.1f} | {statistics.mean(diff):+.1f} +- {se:.1f} "
                f"({sum(d > 1e-9 for d in diff)} better, {sum(d < -1e-9 for d in diff)} worse) |")

    for key in sorted(set(taken) | set(left), key=str):
        if taken[key]:
            lines.append(row(" | ".join(str(v) for v in key), taken[key], left[key]))
        else:
            lines.append("| " + " | ".join(str(v) for v in key) + f" | 0 / {left[key]} | - | - | - |")
    every = [p for pairs in taken.values() for p in pairs]
    if every:
        lines.append(row("all | | |", every, sum(left.values())))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+", type=Path)
    args = ap.parse_args(argv)
    print(table(args.records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
