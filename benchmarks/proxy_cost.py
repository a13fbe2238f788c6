"""What the proxies cost: a run without proxies, with P proxies one after another, and with them stacked as one batch
(fedaudit/attacks/stacked_targets.py).

    PYTHONPATH=. .venv/bin/python -m benchmarks.proxy_cost                # one CPU thread, ~10 min
    PYTHONPATH=. .venv/bin/python -m benchmarks.proxy_cost --device cuda  # on a GPU
    PYTHONPATH=. .venv/bin/python -m benchmarks.proxy_cost --quick

``ReconstructJob.run()`` without truth, as ``fedaudit reconstruct`` runs it (labels given, so the label method's time
is not in it), on a seeded random-init model and the FedSGD gradient of foolbox's first B CIFAR-10 test images, IG
with its defaults except the budget. Three modes, interleaved, median over the rounds: ``--proxies 0``;
``--proxies P`` one after another (stacking switched off here, each proxy's own restarts still batched as in a run);
``--proxies P`` stacked (the default). Each as a multiple of the run without proxies (issue 63's target: at most
P + 1), and whether the two proxy modes measured the same proxies (largest PSNR difference, bands equal): the
stacked rows' gradients are summed in another order (vmap), which the signed step amplifies over a run, as for
batched restarts. Writes
benchmarks/results/proxy_cost.md and proxy_cost.json.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, cifar_update, markdown, sync, write_results
from fedaudit.attacks import stacked_targets
from fedaudit.jobs import ReconstructJob, Session

# (architecture, options, B, iterations)
CASES = (("lenet", {}, 1, 300), ("lenet", {}, 4, 300), ("flower-cnn", {}, 4, 200), ("resnet10", {"width": 16}, 4, 60),
         ("vit-tiny", {}, 1, 60))
MODES = ("none", "one_by_one", "stacked")


@contextlib.contextmanager
def stacking(on: bool):
    """Stacking as shipped, or switched off (the proxies then run one after another, as before it existed)."""
    real = stacked_targets.why_not
    if not on:
        stacked_targets.why_not = lambda attacks, cfg: "switched off by benchmarks.proxy_cost"
    try:
        yield
    finally:
        stacked_targets.why_not = real


def run(tm, labels, iterations, restarts, mode, proxies, device):
    job = ReconstructJob(Session(seed=0, device=device, quiet=True), tm, "ig", {},
                         {"iterations": iterations, "restarts": restarts}, given_labels=labels,
                         proxies=0 if mode == "none" else proxies)
    with stacking(mode == "stacked"):
        sync(device)
        t0 = time.perf_counter()
        result = job.run()
        sync(device)
        seconds = time.perf_counter() - t0
    section = result.report.to_json()["evidence"]["proxies"] or {}
    return seconds, section


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the first case, one round")
    ap.add_argument("--case", action="append", default=[], metavar="ARCH:B:ITERATIONS",
                    help="run this case instead of the shipped ones (repeatable; e.g. lenet:1:4000, IG's default budget)")
    ap.add_argument("--name", default="proxy_cost", help="results file name (benchmarks/results/NAME.md, .json)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--proxies", type=int, default=3)
    ap.add_argument("--restarts", default="1,2", help="restart counts, comma-separated")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rounds = 1 if args.quick else args.rounds
    rows = []
    cases = [(a, {}, int(b), int(n)) for a, b, n in (c.split(":") for c in args.case)] or \
        (CASES[:1] if args.quick else CASES)
    for arch, options, b, iterations in cases:
        _, _, _, labels, tm = cifar_update(arch, b, options)
        params = sum(p.numel() for p in tm.model.parameters())
        run(tm, labels, 2, 1, "stacked", 1, args.device)  # warm-up (LPIPS, public images): not timed
        for restarts in (int(r) for r in args.restarts.split(",")):
            times: dict[str, list[float]] = {m: [] for m in MODES}
            sections: dict[str, dict] = {}
            for _ in range(rounds):
                for mode in MODES:
                    t, sections[mode] = run(tm, labels, iterations, restarts, mode, args.proxies, args.device)
                    times[mode].append(t)
                print(f"{arch} B={b} R={restarts}: " + ", ".join(f"{m} {times[m][-1]:.2f} s" for m in MODES),
                      file=sys.stderr, flush=True)
            base = statistics.median(times["none"])
            a, s = sections["one_by_one"].get("measured", []), sections["stacked"].get("measured", [])
            rows.append({
                "arch": arch, "options": options, "parameters": params, "B": b, "iterations": iterations,
                "restarts": restarts, "proxies": args.proxies, "threads": args.threads,
                **{m: {"s": statistics.median(v), "all": v, "x_run": statistics.median(v) / base} for m, v in times.items()},
                "stacked_batches": sections["stacked"].get("stacked_batches"),
                "one_by_one_why": sections["stacked"].get("one_by_one"),
                "measured": [len(a), len(s)],
                "max_psnr_diff": max((abs(x["psnr"] - y["psnr"]) for x, y in zip(a, s)), default=None),
                "same_bands": sum(x["measured"] == y["measured"] for x, y in zip(a, s))})
    table = markdown(
        ["case", "params", "R", "no proxies", f"{args.proxies} proxies one by one", f"{args.proxies} proxies stacked",
         "stacked batches", "max PSNR diff (dB)", "same bands"],
        [[f"{r['arch']}{'/' + str(r['options']) if r['options'] else ''} B = {r['B']}, {r['iterations']} it",
          f"{r['parameters']:,}", r["restarts"], f"{r['none']['s']:.1f} s",
          f"{r['one_by_one']['s']:.1f} s ({r['one_by_one']['x_run']:.2f}x)",
          f"{r['stacked']['s']:.1f} s ({r['stacked']['x_run']:.2f}x)", r["stacked_batches"] or r["one_by_one_why"],
          "-" if r["max_psnr_diff"] is None else f"{r['max_psnr_diff']:.3f}",
          f"{r['same_bands']}/{min(r['measured'])}"] for r in rows])
    write_results(args.out, args.name, {"rows": rows, "device": args.device, "threads": args.threads,
                                           "rounds": rounds, "torch": torch.__version__}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
