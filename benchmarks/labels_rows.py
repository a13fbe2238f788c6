"""`auto` against the best single method, per client and per row of a table, read against the noise.

Issue 16's target "`auto` within 2 points of the best single method in every benchmark row" can be read two ways,
and the two differ by the noise of a maximum taken after the fact:

- **per client** (a row of one client, as in the LeNet grid): the best single method is the client's maximum over
  the methods, chosen with the truth. No fixed method can be that maximum on every client, so the count every method
  reaches is printed beside `auto`'s: it says what the per-client reading can be asked of any method;
- **per row of a table** (the clients of a setting pooled): the best single method is the one with the highest mean
  over the row's clients, and `auto`'s paired difference from it is printed with its standard error, so that a gap
  can be read against the spread of the clients.

    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_rows RECORDS.jsonl [...] [--auto AUTO.jsonl ...] \
        [--by model,state,batch,K] [--methods bias-count,zlg,...]

RECORDS are ``--records`` lines of ``benchmarks.labels_fedavg`` (one client each, ``methods`` holding each method's
InsAcc); an ``--auto`` file's `auto` replaces the records' on the clients it covers (a later run of `auto` alone on
the same clients). ``--methods`` defaults to every method every record holds, less `auto` and its variants
(``auto-*``) and the benchmark-only oracles (``*oracle*``).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
from pathlib import Path

from benchmarks.records import jsonl_rows

TOLERANCE = 0.02  # the target's 2 points, in InsAcc's [0, 1]
_KEY = ("model", "state", "K", "lr", "momentum", "B", "batch", "trial")


def load(records: list[Path], autos: list[Path]) -> list[dict]:
    """The clients, each with ``methods`` (name -> InsAcc); `auto` replaced where an ``--auto`` run covers it."""
    later = {tuple(r.get(k) for k in _KEY): r["methods"]["auto"]["InsAcc"] for r in jsonl_rows(*autos)}
    clients = []
    for r in jsonl_rows(*records):
        ins = {name: m["InsAcc"] for name, m in r["methods"].items() if m.get("InsAcc") is not None}
        key = tuple(r.get(k) for k in _KEY)
        if key in later:
            ins["auto"] = later[key]
        clients.append({**{k: r.get(k) for k in _KEY}, "methods": ins})
    return clients


def singles(clients: list[dict]) -> list[str]:
    """The single methods every client was read with (not `auto`, its variants or an oracle)."""
    common = set.intersection(*(set(c["methods"]) for c in clients))
    return sorted(m for m in common if m != "auto" and not m.startswith("auto-") and "oracle" not in m)


def per_client(clients: list[dict], methods: list[str]) -> dict[str, int]:
    """How many clients each method (and `auto`) reads within 2 points of that client's best single method."""
    counts = {}
    for name in [*methods, "auto"]:
        counts[name] = sum(c["methods"][name] >= max(c["methods"][m] for m in methods) - TOLERANCE - 1e-9
                           for c in clients)
    return counts


def _order(value) -> tuple:
    """Numbers before text, each in its own order (K = 2 before K = 10)."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def per_row(clients: list[dict], methods: list[str], by: list[str]) -> list[dict]:
    """Per group of clients: `auto`'s mean, the method with the best mean, and `auto` - that method per client."""
    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    for c in clients:
        groups[tuple(c[k] for k in by)].append(c)
    rows = []
    for key, group in sorted(groups.items(), key=lambda kv: tuple(_order(v) for v in kv[0])):
        means = {m: statistics.mean(c["methods"][m] for c in group) for m in [*methods, "auto"]}
        best = max(methods, key=lambda m: means[m])
        diff = [c["methods"]["auto"] - c["methods"][best] for c in group]
        se = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else float("nan")
        rows.append({"row": dict(zip(by, key)), "clients": len(group), "auto": means["auto"], "best": best,
                     "best_mean": means[best], "diff": statistics.mean(diff), "se": se,
                     "within": means["auto"] >= means[best] - TOLERANCE - 1e-9})
    return rows


def table(clients: list[dict], methods: list[str], by: list[str]) -> str:
    """Both readings as markdown."""
    counts = per_client(clients, methods)
    lines = [f"Per client ({len(clients)} clients): how many each reads within 2 points of the client's best single "
             "method (chosen after the fact, with the truth).", "",
             "| method | clients within 2 | mean InsAcc |", "|---|---|---|"]
    for name in sorted(counts, key=lambda m: -counts[m]):
        mean = statistics.mean(c["methods"][name] for c in clients)
        lines.append(f"| {name} | {counts[name]} | {100 * mean:.1f} |")
    rows = per_row(clients, methods, by)
    lines += ["", f"Per row ({', '.join(by)}): `auto` against the single method with the best mean over the row's "
              "clients; the difference per client, mean +- standard error.", "",
              "| " + " | ".join(by) + " | clients | auto | best single | its mean | auto - best | within 2 |",
              "|" + "---|" * (len(by) + 6)]
    for r in rows:
        lines.append("| " + " | ".join(str(v) for v in r["row"].values())
                     + f" | {r['clients']} | {100 * r['auto']:.1f} | {r['best']} | {100 * r['best_mean']:.1f} | "
                     f"{100 * r['diff']:+.1f} +- {100 * r['se']:.1f} | {'yes' if r['within'] else 'no'} |")
    short = [r for r in rows if not r["within"]]
    inside = sum(r["diff"] + 2 * r["se"] >= -TOLERANCE for r in short)
    lines += ["", f"Rows within 2 points: {len(rows) - len(short)} of {len(rows)}. Rows short of it: {len(short)}, "
              f"{inside} of them within 2 points at two standard errors."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--auto", type=Path, action="append", default=[])
    ap.add_argument("--by", default="model,state,batch,K")
    ap.add_argument("--methods", default="")
    args = ap.parse_args(argv)
    clients = load(args.records, args.auto)
    if not clients:
        print("no records", file=sys.stderr)
        return 2
    methods = args.methods.split(",") if args.methods else singles(clients)
    print(table(clients, methods, args.by.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
