"""fedaudit against breaching (a peer implementation of Inverting Gradients) on the same captured updates.

    .venv/bin/pip install -e '.[bench]'        # breaching 0.1.2: benchmark-only, never a runtime dependency
    .venv/bin/python -m benchmarks.peer        # one CPU thread each, interleaved (~10 min)
    .venv/bin/python -m benchmarks.peer --quick

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

from benchmarks.common import RESULTS, cifar_update, forward_backward_seconds, score, write_results
from fedaudit.data.offline import CIFAR10_STD
from fedaudit.jobs import ReconstructJob, Session

CASES = (("lenet", 1, 300), ("resnet18", 4, 40), ("resnet18", 16, 12))  # (architecture, B, iterations)


def fedaudit_run(tm, labels, iterations, lr, tv, seed):
    loop = {"iterations": iterations, "lr": lr, "restarts": 1, "schedule": "step"}
    job = ReconstructJob(Session(seed=seed), tm, "ig", {"tv": tv}, loop, given_labels=labels)
    attack = job.build(labels)
    t0 = time.perf_counter()
    result = job.optimize(attack, labels)
    return time.perf_counter() - t0, result.images


def breaching_run(model, spec, tm, labels, iterations, seed):
    import breaching  # the bench extra

    cfg = breaching.get_config(overrides=["case=1_single_image_small", "case/data=CIFAR10", "attack=invertinggradients"])
    cfg.attack.optim.max_iterations = iterations
    cfg.attack.optim.callback = 10 ** 9
    setup = {"device": torch.device("cpu"), "dtype": torch.float}
    attacker = breaching.attacks.prepare_attack(model, torch.nn.CrossEntropyLoss(), cfg.attack, setup)
    meta = cfg.case.data
    meta.shape, meta.mean, meta.std = list(spec.input_shape), list(spec.mean), list(spec.std)
    names = [n for n, _ in model.named_parameters()]
    payload = [{"parameters": [p.detach() for p in model.parameters()], "buffers": None, "metadata": meta}]
    shared = [{"gradients": [tm.gradient[n] for n in names], "buffers": None,
               "metadata": {"num_data_points": len(labels), "labels": torch.tensor(labels), "local_hyperparams": None}}]
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    out, _ = attacker.reconstruct(payload, shared, {}, dryrun=False)
    seconds = time.perf_counter() - t0
    dm = torch.tensor(spec.mean).view(1, -1, 1, 1)
    ds = torch.tensor(spec.std).view(1, -1, 1, 1)
    return seconds, (out["data"] * ds + dm).clamp(0, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="LeNet only, fewer iterations and rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cases = ((CASES[0][0], 1, 100),) if args.quick else CASES
    rounds = 2 if args.quick else args.rounds
    s = statistics.mean(CIFAR10_STD)
    rows = []
    for arch, b, iterations in cases:
        spec, model, x, labels, tm = cifar_update(arch, b)
        y = torch.tensor(labels)
        fb = forward_backward_seconds(model, spec, x, y, repeats=5, warmup=1)
        runs: dict[str, list[tuple[float, float]]] = {"fedaudit (aligned)": [], "breaching": [], "fedaudit (defaults)": []}
        for r in range(rounds):
            t, img = fedaudit_run(tm, labels, iterations, 0.1 * s, 0.2 / s, seed=r)
            runs["fedaudit (aligned)"].append((t / iterations, score(img, x)[0]))
            t, img = breaching_run(model, spec, tm, labels, iterations, seed=r)
            runs["breaching"].append((t / iterations, score(img, x)[0]))
            t, img = fedaudit_run(tm, labels, iterations, 0.1, 0.2, seed=r)
            runs["fedaudit (defaults)"].append((t / iterations, score(img, x)[0]))
            print(f"{arch} B={b} round {r}: " + ", ".join(f"{k} {v[-1][0] * 1000:.1f} ms/it {v[-1][1]:.2f} dB"
                                                           for k, v in runs.items()), file=sys.stderr, flush=True)
        row = {"arch": arch, "B": b, "iterations": iterations, "rounds": rounds, "forward_backward_s": fb}
        for k, v in runs.items():
            row[k] = {"s_per_iter": statistics.median(t for t, _ in v), "s_per_iter_all": [t for t, _ in v],
                      "psnr": [p for _, p in v]}
        row["ratio"] = row["fedaudit (aligned)"]["s_per_iter"] / row["breaching"]["s_per_iter"]
        rows.append(row)
    lines = ["| case | iterations | fedaudit s/iter | breaching s/iter | ratio | x forward+backward | PSNR fedaudit "
             "(aligned) | PSNR breaching | PSNR fedaudit (defaults) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fa, br, fd = r["fedaudit (aligned)"], r["breaching"], r["fedaudit (defaults)"]
        p = lambda v: f"{statistics.mean(v['psnr']):.2f} ({min(v['psnr']):.2f}-{max(v['psnr']):.2f})"  # noqa: E731
        lines.append(f"| {r['arch']} B = {r['B']} | {r['iterations']} | {fa['s_per_iter'] * 1000:.1f} ms | "
                     f"{br['s_per_iter'] * 1000:.1f} ms | {r['ratio']:.2f} | {fa['s_per_iter'] / r['forward_backward_s']:.1f} | "
                     f"{p(fa)} | {p(br)} | {p(fd)} |")
    write_results(args.out, "peer", {"rows": rows, "threads": 1, "torch": torch.__version__}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
