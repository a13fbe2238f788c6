"""fedaudit against breaching (a peer implementation of Inverting Gradients) on the same captured updates.

    .venv/bin/pip install -e '.[bench]'        # breaching 0.1.2: benchmark-only, never a runtime dependency
    .venv/bin/python -m benchmarks.peer        # one CPU thread each, interleaved (~10 min)
    .venv/bin/python -m benchmarks.peer --quick
    .venv/bin/python -m benchmarks.peer --device cuda  # the GPU rows, eager and --cuda-graph on (peer_cuda.md)

Both tools get the same model weights (seeded random init), the same FedSGD gradient of the same real CIFAR-10
images (foolbox's samples) and the true labels. Settings are aligned: breaching optimises the *normalised* image with
lr 0.1 and TV 0.2 (its ``invertinggradients.yaml``), which in fedaudit's [0,1] pixel space is lr 0.1 * s and TV 0.2 / s
for the data's std s (about 0.25 for CIFAR-10): fedaudit runs with ``--lr 0.1*s --tv 0.2/s``, and also with its own
defaults (lr 0.1, TV 0.2 on pixels). Same iterations, the same step schedule relative to the budget (decay at 3/8,
5/8, 7/8), signed Adam, one trial. Runs alternate tool by tool (fedaudit, breaching, fedaudit, ...), so a slow
moment of the machine hits both. Reported: seconds per iteration (median over rounds), their ratio, PSNR of each
final reconstruction after one-to-one matching, and fedaudit's cost as a multiple of one plain forward + backward
of the batch. Writes benchmarks/results/peer.md and peer.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, cifar_update, forward_backward_seconds, score, sync, write_results
from fedaudit.data.offline import CIFAR10_STD
from fedaudit.jobs import ReconstructJob, Session

CASES = (("lenet", 1, 300), ("resnet18", 4, 40), ("resnet18", 16, 12))  # (architecture, B, iterations)
GPU_CASES = (("lenet", 1, 1000), ("resnet18", 4, 400), ("resnet18", 16, 300))  # issue #22's GPU budgets


def fedaudit_run(tm, labels, iterations, lr, tv, seed, device="cpu", graph="off"):
    loop = {"iterations": iterations, "lr": lr, "restarts": 1, "schedule": "step", "cuda-graph": graph}
    job = ReconstructJob(Session(seed=seed, device=device), tm, "ig", {"tv": tv}, loop, given_labels=labels)
    attack = job.build(labels)
    sync(device)
    t0 = time.perf_counter()
    result = job.optimize(attack, labels)
    sync(device)
    return time.perf_counter() - t0, result.images.cpu()


def breaching_run(model, spec, tm, labels, iterations, seed, device="cpu"):
    import breaching  # the bench extra

    cfg = breaching.get_config(overrides=["case=1_single_image_small", "case/data=CIFAR10", "attack=invertinggradients"])
    cfg.attack.optim.max_iterations = iterations
    cfg.attack.optim.callback = 10 ** 9
    setup = {"device": torch.device(device), "dtype": torch.float}
    model = model.to(device)
    attacker = breaching.attacks.prepare_attack(model, torch.nn.CrossEntropyLoss(), cfg.attack, setup)
    meta = cfg.case.data
    meta.shape, meta.mean, meta.std = list(spec.input_shape), list(spec.mean), list(spec.std)
    names = [n for n, _ in model.named_parameters()]
    payload = [{"parameters": [p.detach() for p in model.parameters()], "buffers": None, "metadata": meta}]
    shared = [{"gradients": [tm.gradient[n].to(device) for n in names], "buffers": None,
               "metadata": {"num_data_points": len(labels), "labels": torch.tensor(labels, device=device),
                            "local_hyperparams": None}}]
    torch.manual_seed(seed)
    sync(device)
    t0 = time.perf_counter()
    out, _ = attacker.reconstruct(payload, shared, {}, dryrun=False)
    sync(device)
    seconds = time.perf_counter() - t0
    dm = torch.tensor(spec.mean).view(1, -1, 1, 1)
    ds = torch.tensor(spec.std).view(1, -1, 1, 1)
    return seconds, (out["data"].cpu() * ds + dm).clamp(0, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="LeNet only, fewer iterations and rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: the GPU rows (adds fedaudit with --cuda-graph on)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    gpu = args.device.startswith("cuda")
    cases = ((CASES[0][0], 1, 100),) if args.quick else (GPU_CASES if gpu else CASES)
    rounds = 2 if args.quick else args.rounds
    s = statistics.mean(CIFAR10_STD)
    rows = []
    for arch, b, iterations in cases:
        spec, model, x, labels, tm = cifar_update(arch, b)
        y = torch.tensor(labels)
        fb = None if gpu else forward_backward_seconds(model, spec, x, y, repeats=5, warmup=1)
        runs: dict[str, list[tuple[float, float]]] = {"fedaudit (aligned)": [], "breaching": [], "fedaudit (defaults)": []}
        fedaudit_run(tm, labels, 10, 0.1 * s, 0.2 / s, 0, args.device)  # warm-up of both tools (lazy imports, caches,
        breaching_run(model, spec, tm, labels, 10, 0, args.device)  # cuDNN): the first run was up to 6x slower
        if gpu:
            runs["fedaudit (aligned, graph)"] = []
            fedaudit_run(tm, labels, 10, 0.1 * s, 0.2 / s, 0, args.device, "on")
        for r in range(rounds):
            t, img = fedaudit_run(tm, labels, iterations, 0.1 * s, 0.2 / s, r, args.device)
            runs["fedaudit (aligned)"].append((t / iterations, score(img, x)[0]))
            t, img = breaching_run(model, spec, tm, labels, iterations, r, args.device)
            runs["breaching"].append((t / iterations, score(img, x)[0]))
            t, img = fedaudit_run(tm, labels, iterations, 0.1, 0.2, r, args.device)
            runs["fedaudit (defaults)"].append((t / iterations, score(img, x)[0]))
            if gpu:
                t, img = fedaudit_run(tm, labels, iterations, 0.1 * s, 0.2 / s, r, args.device, "on")
                runs["fedaudit (aligned, graph)"].append((t / iterations, score(img, x)[0]))
            print(f"{arch} B={b} round {r}: " + ", ".join(f"{k} {v[-1][0] * 1000:.1f} ms/it {v[-1][1]:.2f} dB"
                                                           for k, v in runs.items()), file=sys.stderr, flush=True)
        row = {"arch": arch, "B": b, "iterations": iterations, "rounds": rounds, "forward_backward_s": fb}
        for k, v in runs.items():
            row[k] = {"s_per_iter": statistics.median(t for t, _ in v), "s_per_iter_all": [t for t, _ in v],
                      "psnr": [p for _, p in v]}
        row["ratio"] = row["fedaudit (aligned)"]["s_per_iter"] / row["breaching"]["s_per_iter"]
        if gpu:
            row["ratio_graph"] = row["fedaudit (aligned, graph)"]["s_per_iter"] / row["breaching"]["s_per_iter"]
        rows.append(row)
    lines = ["| case | iterations | fedaudit s/iter | breaching s/iter | ratio | x forward+backward | PSNR fedaudit "
             "(aligned) | PSNR breaching | PSNR fedaudit (defaults) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fa, br, fd = r["fedaudit (aligned)"], r["breaching"], r["fedaudit (defaults)"]
        p = lambda v: f"{statistics.mean(v['psnr']):.2f} ({min(v['psnr']):.2f}-{max(v['psnr']):.2f})"  # noqa: E731
        fb = "-" if r["forward_backward_s"] is None else f"{fa['s_per_iter'] / r['forward_backward_s']:.1f}"
        lines.append(f"| {r['arch']} B = {r['B']} | {r['iterations']} | {fa['s_per_iter'] * 1000:.1f} ms | "
                     f"{br['s_per_iter'] * 1000:.1f} ms | {r['ratio']:.2f} | {fb} | {p(fa)} | {p(br)} | {p(fd)} |")
    if gpu:
        lines += ["", f"{torch.cuda.get_device_name()}: fedaudit (aligned) with --cuda-graph on", "",
                  "| case | graph s/iter | ratio to breaching | PSNR |", "|---|---|---|---|"]
        for r in rows:
            g = r["fedaudit (aligned, graph)"]
            lines.append(f"| {r['arch']} B = {r['B']} | {g['s_per_iter'] * 1000:.2f} ms | {r['ratio_graph']:.2f} | "
                         f"{statistics.mean(g['psnr']):.2f} |")
    name = "peer_" + args.device.replace(":", "") if gpu else "peer"
    write_results(args.out, name, {"rows": rows, "threads": 1, "device": args.device, "torch": torch.__version__},
                  "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
