"""Start-up cost of the console script: what a shell pipeline pays on every call.

    .venv/bin/python -m benchmarks.startup            # ~1 min; --rounds N

Runs the installed ``fedaudit`` script (a fresh process each time, output discarded) for ``--version``, the root
``--help``, every command group's and some method subcommands' ``--help``, and ``inspect`` on two sample updates;
reports the median and the range of wall-clock seconds over the rounds, and which heavy modules each call imports
(help is served from the light catalog, fedaudit/catalog.py). Targets (issue "throughput"): help <= 0.5 s,
``inspect`` <= 3 s on a 2-core CPU. Writes benchmarks/results/startup.md and startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("fedaudit")
SAMPLES = ROOT / "sample_updates"
CALLS = [
    ["--version"], ["--help"], ["labels", "--help"], ["labels", "auto", "--help"], ["reconstruct", "--help"],
    ["reconstruct", "ig", "--help"], ["reconstruct", "fedleak", "--help"], ["defend", "dp", "--help"], ["audit", "--help"],
    ["capture", "--help"],
    ["inspect", str(SAMPLES / "lenet_b4/checkpoint.safetensors"), str(SAMPLES / "lenet_b4/update.safetensors"), "-q"],
    ["inspect", str(SAMPLES / "resnet10_b4/checkpoint.safetensors"), str(SAMPLES / "resnet10_b4/update.safetensors"), "-q"],
]


def seconds(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(SCRIPT), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    seconds(["--version"])  # warm the file cache once
    keys = [" ".join(a if not a.startswith("/") else f"{Path(a).parent.name}/{Path(a).name}" for a in c) for c in CALLS]
    times: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(args.rounds):  # interleaved: a slow moment of the machine hits every call
        for call, key in zip(CALLS, keys):
            times[key].append(seconds(call))
    rows = [{"call": k, "median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)} for k, v in times.items()]
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}"
    lines = [f"# fedaudit start-up ({machine}; {args.rounds} rounds, fresh process each)", "",
             "| call | median s | range s |", "|---|---|---|"]
    lines += [f"| `fedaudit {r['call']}` | {r['median_s']:.2f} | {r['min_s']:.2f}-{r['max_s']:.2f} |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "startup.json").write_text(json.dumps({"machine": machine, "rounds": args.rounds, "rows": rows}, indent=1))
    (args.out / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
