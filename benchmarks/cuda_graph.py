"""Eager against CUDA-graph iterations, and restarts as one captured batch, on a GPU (issue #22's GPU rows).

    .venv/bin/python -m benchmarks.cuda_graph                   # needs CUDA; about 7 minutes on an H200
    .venv/bin/python -m benchmarks.cuda_graph --quick           # LeNet only
    .venv/bin/python -m benchmarks.cuda_graph --restarts-only   # the restarts rows (about 1.5 minutes on an H200)
    .venv/bin/python -m benchmarks.cuda_graph --profile         # kernel launches per iteration, eager and graph

The same seeded random-init model and FedSGD gradient of the first B CIFAR-10 images (foolbox's samples) as
benchmarks/peer.py, true labels, the attack's defaults except the budget. For each case the whole run with
``--cuda-graph off`` (eager) and ``on`` (captured; the run fails if capture does), interleaved, median of the rounds:
seconds per iteration (the run's wall-clock over its iterations: warm-up, the capture self-check and the final scoring
included) and the PSNR of each (same seeds, so they should agree). Then ``--restarts`` 1, 8 and 32 as one stacked
batch with the graph, as a multiple of one restart's run. The issue's targets: IG ResNet-18 B = 16 <= 15 ms per
iteration, LeNet B = 1 <= 1 ms, 8 restarts <= 1.5x one. Writes benchmarks/results/cuda_graph.md and .json
(``--restarts-only``: cuda_graph_restarts.md and .json). ``--profile``: torch.profiler over PROFILE_ITERATIONS
iterations of each PROFILE_CASES case in both modes after an unprofiled warm-up run; counts the CUDA runtime's
kernel launches (cudaLaunchKernel and its variants) and graph launches per iteration, the warm-up, capture and
final scoring of the profiled run included (cuda_graph_profile.md and .json). Results: docs/results/throughput.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, cifar_update, score, write_results
from fedaudit.jobs import ReconstructJob, Session

CASES = (("ig", "lenet", 1, 1000), ("ig", "resnet18", 4, 300), ("ig", "resnet18", 16, 300),
         ("fedleak", "resnet18", 16, 200))  # (attack, architecture, B, iterations)
RESTARTS = (("lenet", 1, 300), ("resnet18", 16, 100))  # (architecture, B, iterations) for restarts 1 / 8 / 32
PROFILE_CASES = (("ig", "lenet", 1), ("ig", "resnet18", 16), ("fedleak", "resnet18", 16))  # (attack, architecture, B)
PROFILE_ITERATIONS = 40


def run(tm, labels, attack, iterations, mode, restarts=1, seed=0):
    job = ReconstructJob(Session(seed=seed, device="cuda", quiet=True), tm, attack, {},
                         {"iterations": iterations, "restarts": restarts, "cuda-graph": mode}, given_labels=labels)
    built = job.build(labels)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    result = job.optimize(built, labels)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, result


def table(rows: list[dict], restart_rows: list[dict], device: str) -> str:
    lines = [device, "", "| attack | case | iterations | eager ms/iter | graph ms/iter | speedup | PSNR eager | PSNR graph |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ps = lambda v: f"{statistics.mean(v['psnr']):.2f}"  # noqa: E731
        lines.append(f"| {r['attack']} | {r['arch']} B = {r['B']} | {r['iterations']} | {r['off']['s_per_iter'] * 1e3:.2f} | "
                     f"{r['on']['s_per_iter'] * 1e3:.2f} | {r['speedup']:.1f}x | {ps(r['off'])} | {ps(r['on'])} |")
    lines += ["", "| case | iterations | 1 restart | 8 restarts | 32 restarts |", "|---|---|---|---|---|"]
    for r in restart_rows:
        s, x1 = r["seconds"], r["x_one"]
        lines.append(f"| ig {r['arch']} B = {r['B']} | {r['iterations']} | {s['1']:.2f} s | {s['8']:.2f} s ({x1['8']:.2f}x) | "
                     f"{s['32']:.2f} s ({x1['32']:.2f}x) |")
    return "\n".join(lines) + "\n"


def save(args, rows: list[dict], restart_rows: list[dict], final: bool = False) -> None:
    """OUT/cuda_graph.{json,md} (``--restarts-only``: cuda_graph_restarts.*) with the rows so far; the final save
    also prints the table."""
    name = "cuda_graph_restarts" if args.restarts_only else "cuda_graph"
    device = f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    doc = {"rows": rows, "restarts": restart_rows, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "complete": final}
    if final:
        write_results(args.out, name, doc, table(rows, restart_rows, device))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(doc, indent=1))
    (args.out / f"{name}.md").write_text(table(rows, restart_rows, device))


def launches(tm, labels, attack, mode) -> dict:
    """One profiled run of PROFILE_ITERATIONS iterations: CUDA runtime calls that launch kernels or graphs, per
    iteration, and the run's wall-clock per iteration under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t, _ = run(tm, labels, attack, PROFILE_ITERATIONS, mode)
    runtime = {e.key: e.count for e in prof.key_averages() if e.key.startswith("cu")}  # every runtime/driver call
    counts = {"kernel": 0, "graph": 0}
    for key, count in runtime.items():
        if key.startswith(("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel")):
            counts["kernel"] += count
        elif key.startswith(("cudaGraphLaunch", "cuGraphLaunch")):
            counts["graph"] += count
    return {"kernel_launches_per_iter": counts["kernel"] / PROFILE_ITERATIONS,
            "graph_launches_per_iter": counts["graph"] / PROFILE_ITERATIONS, "ms_per_iter_profiled": t / PROFILE_ITERATIONS * 1e3,
            "runtime_calls": runtime}


def profile_rows(args) -> int:
    rows = []
    for attack, arch, b in PROFILE_CASES:
        spec, model, x, labels, tm = cifar_update(arch, b)
        row = {"attack": attack, "arch": arch, "B": b, "iterations": PROFILE_ITERATIONS}
        for mode in ("off", "on"):
            run(tm, labels, attack, 10, mode)  # warm-up: cuDNN's choices and the allocator, outside the profile
            row[mode] = launches(tm, labels, attack, mode)
            print(f"{attack} {arch} B={b} {mode}: {row[mode]}", file=sys.stderr, flush=True)
        rows.append(row)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cuda_graph_profile.json").write_text(json.dumps({"rows": rows, "complete": False}, indent=1))
    lines = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {PROFILE_ITERATIONS} profiled iterations", "",
             "| attack | case | eager launches/it | eager ms/it (profiled) | graph: kernel launches/it | graph launches/it "
             "| graph ms/it (profiled) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        e, g = r["off"], r["on"]
        lines.append(f"| {r['attack']} | {r['arch']} B = {r['B']} | {e['kernel_launches_per_iter']:.0f} | "
                     f"{e['ms_per_iter_profiled']:.1f} | {g['kernel_launches_per_iter']:.0f} | {g['graph_launches_per_iter']:.2f} | "
                     f"{g['ms_per_iter_profiled']:.1f} |")
    write_results(args.out, "cuda_graph_profile", {"rows": rows, "complete": True, "device": torch.cuda.get_device_name(),
                                                   "torch": torch.__version__}, "\n".join(lines) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="LeNet only, fewer rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--restarts-only", action="store_true", help="only the restarts rows (cuda_graph_restarts.{md,json})")
    ap.add_argument("--profile", action="store_true", help="kernel launches per iteration (cuda_graph_profile.{md,json})")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.cuda_graph needs a CUDA device", file=sys.stderr)
        return 2
    if args.profile:
        return profile_rows(args)
    cases = () if args.restarts_only else CASES[:1] if args.quick else CASES
    rounds = 2 if args.quick else args.rounds
    rows = []
    for attack, arch, b, iterations in cases:
        spec, model, x, labels, tm = cifar_update(arch, b)
        run(tm, labels, attack, 10, "on")  # warm-up (cuDNN, allocator): not timed
        got: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
        captured = None
        for r in range(rounds):
            for mode in ("off", "on"):
                t, res = run(tm, labels, attack, iterations, mode, seed=r)
                got[mode].append((t / iterations, score(res.images.cpu(), x)[0]))
                if mode == "on":
                    captured = res.cuda_graph
            print(f"{attack} {arch} B={b} round {r}: " + ", ".join(
                f"{m} {v[-1][0] * 1e3:.2f} ms/it {v[-1][1]:.2f} dB" for m, v in got.items()), file=sys.stderr, flush=True)
        row = {"attack": attack, "arch": arch, "B": b, "iterations": iterations, "captured": captured}
        for mode, v in got.items():
            row[mode] = {"s_per_iter": statistics.median(t for t, _ in v), "all": [t for t, _ in v], "psnr": [p for _, p in v]}
        row["speedup"] = row["off"]["s_per_iter"] / row["on"]["s_per_iter"]
        rows.append(row)
        save(args, rows, [])  # a run stopped by a time limit keeps the rows it finished
    restart_rows = []
    for arch, b, iterations in RESTARTS[:1] if args.quick else RESTARTS:
        spec, model, x, labels, tm = cifar_update(arch, b)
        times: dict[int, list[float]] = {1: [], 8: [], 32: []}
        for count in times:  # warm-up (CUDA start-up, cuDNN, each batch size's kernels): not timed
            run(tm, labels, "ig", 10, "on", restarts=count)
        for r in range(rounds):
            for count in times:
                times[count].append(run(tm, labels, "ig", iterations, "on", restarts=count, seed=r)[0])
        one = statistics.median(times[1])
        restart_rows.append({"arch": arch, "B": b, "iterations": iterations,
                             "seconds": {str(k): statistics.median(v) for k, v in times.items()},
                             "all": {str(k): v for k, v in times.items()},
                             "x_one": {str(k): statistics.median(v) / one for k, v in times.items()}})
        save(args, rows, restart_rows)
    save(args, rows, restart_rows, final=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
