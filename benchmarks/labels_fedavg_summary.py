"""Summarise ``labels_fedavg --records`` runs: per model, state and batch kind, the mean InsAcc of RLU, client-fit, the
ensemble, `auto` and the best single method, and how many rows `auto` is within 2 points of the best, against an
earlier `auto` run on the same clients.

    .venv/bin/python -m benchmarks.labels_fedavg_summary RUN_DIR [RUN_DIR ...] --before BEFORE_DIR [--auto AUTO_DIR ...]

RUN_DIR holds labels_fedavg_clients.jsonl (one line per client, ``--records``); BEFORE_DIR a labels_fedavg.json
whose ``auto`` column is the earlier code's on the same clients (one trial per row); each AUTO_DIR a later
``--methods auto --records`` run whose `auto` replaces the RUN_DIR's on the clients it covers (the same clients,
after a change to `auto` alone).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

SINGLES = ["bias-count", "zlg", "ilrg", "llg", "llg-plus", "rlu", "client-fit"]
COLUMNS = ["best single without client-fit", "rlu", "client-fit", "ensemble", "auto before", "auto now", "best single"]


def _key(r: dict) -> tuple:
    return r["model"], r["state"], r["K"], r["lr"], r["momentum"], r["B"], r["batch"]


def _client_key(r: dict) -> tuple:
    return (*_key(r), r["trial"])


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "labels_fedavg_clients.jsonl").read_text().splitlines() if line]


def summarise(runs: list[Path], before: Path, autos: list[Path]) -> str:
    clients = [r for run in runs for r in _records(run)]
    later = {_client_key(r): r["methods"]["auto"] for run in autos for r in _records(run)}
    earlier = {_key(r): r["InsAcc"]["auto"] for r in json.loads((before / "labels_fedavg.json").read_text())}

    def ins(r: dict, name: str) -> float:
        return r["methods"][name]["InsAcc"]

    def columns(rows: list[dict]) -> dict[str, list[float]]:
        return {"best single without client-fit": [max(ins(r, m) for m in SINGLES[:-1]) for r in rows],
                "rlu": [ins(r, "rlu") for r in rows], "client-fit": [ins(r, "client-fit") for r in rows],
                "ensemble": [ins(r, "auto-ensemble") for r in rows], "auto before": [earlier[_key(r)] for r in rows],
                "auto now": [later.get(_client_key(r), r["methods"]["auto"])["InsAcc"] for r in rows],
                "best single": [max(ins(r, m) for m in SINGLES) for r in rows]}

    def within(auto: list[float], best: list[float]) -> int:
        return sum(a >= b - 0.02 - 1e-9 for a, b in zip(auto, best))

    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    for r in clients:
        groups[(r["model"], r["state"], r["batch"])].append(r)
    lines = ["InsAcc in %, mean over rows (one client per row); within 2: rows where `auto` is at most 2 points behind "
             "the best single method (client-fit included).", "",
             "| model | state | batch | rows | " + " | ".join(COLUMNS) + " | within 2 before | within 2 now |",
             "|---|---|---|---|" + "---|" * (len(COLUMNS) + 2)]
    for (model, state, batch), rows in [*groups.items(), (("all", "", ""), clients)]:
        c = columns(rows)
        lines.append(f"| {model} | {state} | {batch} | {len(rows)} | "
                     + " | ".join(f"{100 * statistics.mean(c[k]):.1f}" for k in COLUMNS)
                     + f" | {within(c['auto before'], c['best single'])} | {within(c['auto now'], c['best single'])} |")
    c = columns(clients)
    diff = [a - b for a, b in zip(c["auto now"], c["auto before"])]
    se = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else float("nan")
    lines += ["", f"`auto` now - before: {100 * statistics.mean(diff):+.2f} +- {100 * se:.2f} points per row (standard "
              f"error); rows losing more than 2 points: {sum(d < -0.02 - 1e-9 for d in diff)}, gaining more than 2: "
              f"{sum(d > 0.02 + 1e-9 for d in diff)}"]
    for k in sorted({r["K"] for r in clients}):
        dk = [d for d, r in zip(diff, clients) if r["K"] == k]
        lines.append(f"- K = {k}: {100 * statistics.mean(dk):+.2f} over {len(dk)} rows")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--auto", type=Path, action="append", default=[])
    args = ap.parse_args(argv)
    print(summarise(args.runs, args.before, args.auto))
    return 0


if __name__ == "__main__":
    sys.exit(main())
