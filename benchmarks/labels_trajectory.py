"""Where label recovery loses on FedAvg deltas: the client's unseen trajectory (issue: label recovery on FedAvg).

    .venv/bin/python -m benchmarks.labels_trajectory --runs 2   # about 35 minutes on 2 CPU cores

RLU's model of a K-step delta is sum_k S(theta_k) n_k - n = N g_hat (fedaudit/labels/rlu.py): S is the mean softmax
per true class at the model the client had before step k. The server sees theta_0 and theta_K, not the models in
between. This benchmark takes S at four places on the same client updates (labels_fedavg's batches and seeds):

* ``global``: the global model only (``rlu --trajectory global``);
* ``interpolate``: the straight path from the global to the client's model, at the constant-gradient fractions;
* ``progress``: the same path at fractions measured on simulated clients (``rlu``'s default; ``--columns``);
* ``true path`` (oracle, needs the victims' images: a benchmark-only reference): the client's own intermediate
  models, from replaying its K SGD steps;
* ``simulated, true counts`` (oracle for the counts): the intermediate models of a simulated client, K SGD steps of
  the whole network on aux digits drawn with the *true* counts in random order, ``--runs`` simulations averaged;
  what a simulation on proxy images gives when it knows the counts.

Beside them, read off the same replay (docs/results/labels.md, "Why the K-step targets stay out of reach"):

* ``step move``: how far one local step moves the model's outputs, the L1 distance between S's columns at the
  global model and at the client's model after its first step, mean over the true classes (2 is a complete swap);
  ``final move`` the same between the global and the final model (truth-free: a delta reveals both);
* ``off path``: the largest part of a true intermediate model's displacement that lies off the straight line to the
  final model, relative to the whole change |Delta|;
* ``momentum ceiling``: what the bias update could show with S exact at every step. A momentum-SGD delta weighs the
  steps' gradients by c_k = (1 - m^(K-k)) / (1 - m), so it fixes sum_k c_k n_k, not n; InsAcc of n_hat = N (sum_k
  c_k n_k) / (B sum_k c_k). 100 without momentum.

Models: DLG LeNet, torch-init LeNet, ConvNet w16, CIFAR ResNet-10 and ResNet-18 (width 16) (BN in train mode), each
at random init and after one epoch of Adam (labels_fedavg's "trained"; the table gives the test accuracy).
``--rows K:lr:momentum:B:batch,...`` replaces the six settings (RLU's own: ``10:0.05:0.9:32:dirichlet``). S is always measured on the 500 aux digits, and
the counts are solved the same way (rlu.solve_counts, then integer counts). Writes OUT/labels_trajectory.json and
OUT/labels_trajectory.md; docs/results/labels.md reads them.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import RESULTS, write_results
from benchmarks.labels import accuracy, data, floor_of, make_model, train
from benchmarks.labels_fedavg import client_update, victims
from fedaudit.conversion import momentum_weights
from fedaudit.defenses.base import flat
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.labels.base import integer_counts
from fedaudit.labels.progress import _uploaded  # the parameters an update carries, as the simulated clients read them
from fedaudit.labels.rlu import class_confidence, solve_counts
from fedaudit.metrics.labels import counts, label_metrics
from fedaudit.models.head import output_layer_io
from fedaudit.models.normalize import normalize

MODELS = {"lenet-dlg": ("lenet (DLG init)", "lenet", {}, "eval"),
          "lenet-torch": ("lenet (torch init)", "lenet", {"init": "torch"}, "eval"),
          "convnet": ("convnet w16", "convnet", {"width": 16}, "train"),
          "resnet10": ("resnet10 w16", "resnet10", {"width": 16}, "train"),
          "resnet18": ("resnet18 w16", "resnet18", {"width": 16}, "train")}
ROWS = [(4, 0.01, 0.0, 16, "random"), (4, 0.1, 0.0, 16, "random"), (8, 0.1, 0.0, 16, "random"),
        (8, 0.01, 0.9, 8, "random"), (4, 0.01, 0.0, 16, "two-class"), (8, 0.01, 0.0, 16, "two-class")]
COLUMNS = ["global", "interpolate", "progress", "true path", "simulated, true counts"]
READINGS = ["step move", "final move", "off path", "momentum ceiling", "floor"]


def local_models(net, spec, x, y, k, b, lr, momentum, bn):
    """The models before each of the K local SGD steps on batches x[kB:(k+1)B] (capture_update's order)."""
    m = copy.deepcopy(net).train(bn == "train")
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum)
    out = []
    for step in range(k):
        out.append(copy.deepcopy(m))
        sel = slice(step * b, (step + 1) * b)
        opt.zero_grad()
        F.cross_entropy(m(normalize(x[sel], spec)), y[sel]).backward()
        opt.step()
    return out


def mean_confidence(tm, models, weights, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """sum_k w_k S(theta_k): S (rlu.class_confidence, empirical) on the aux digits at each model."""
    out = torch.zeros(10, 10, dtype=torch.float64)
    for w, m in zip(weights, models):
        _, z = output_layer_io(m, tm.spec, tm.output_layer, images, tm.train_bn)
        out += w * class_confidence(z.cpu(), labels, "empirical", 0, torch.Generator())
    return out


def path_readings(tm, path, per_step: torch.Tensor, mom: float, ax, ay) -> dict[str, float]:
    """step move, final move, off path and momentum ceiling (module docstring) of one client; ``path``: its models
    before each step, ``per_step`` [K, C]: each step's true counts."""
    k = per_step.shape[0]
    ones = torch.ones(k, dtype=torch.float64)
    final = tm.model_along_update(1.0)
    s0, s1, sk = (mean_confidence(tm, [m], ones[:1], ax, ay) for m in (tm.model, path[min(1, k - 1)], final))
    start = flat(_uploaded(tm, tm.model)).double()
    delta = flat(_uploaded(tm, final)).double() - start
    off = 0.0
    for m in path[1:]:
        d = flat(_uploaded(tm, m)).double() - start
        off = max(off, float((d - (d @ delta) / (delta @ delta) * delta).norm() / delta.norm()))
    return {"step move": float((s1 - s0).abs().sum(0).mean()), "final move": float((sk - s0).abs().sum(0).mean()),
            "off path": off, "momentum ceiling": momentum_ceiling(per_step, mom)}


def momentum_ceiling(per_step: torch.Tensor, momentum: float) -> float:
    """InsAcc of the counts a momentum-SGD delta's bias shows with S exact: sum_k c_k n_k scaled to N (docstring)."""
    k, total = per_step.shape[0], int(per_step.sum())
    c = torch.tensor(momentum_weights(k, momentum), dtype=torch.float64)
    seen = (c[:, None] * per_step.double()).sum(0) * k / c.sum()
    return label_metrics(integer_counts(seen, total), per_step.sum(0))["InsAcc"]


def solved(s_bar: torch.Tensor, observed: torch.Tensor, n_true: torch.Tensor) -> float:
    """InsAcc of RLU's integer counts for S = ``s_bar``."""
    total = int(n_true.sum())
    n, _ = solve_counts(s_bar, observed, total)
    return label_metrics(integer_counts(n, total), n_true)["InsAcc"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="lenet-dlg,lenet-torch,convnet", help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--states", default="random init,trained")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--runs", type=int, default=4, help="simulated clients per update")
    ap.add_argument("--rows", help="comma list of K:lr:momentum:B:batch replacing the six settings")
    ap.add_argument("--columns", help=f"comma list of {', '.join(COLUMNS)} (default: all)")
    ap.add_argument("--first-trial", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    train_xy, (ax, ay), (px, py) = data()
    aux = Aux(ax, ay, "images")
    pools = [torch.nonzero(ay == c).flatten() for c in range(10)]
    settings = ROWS if not args.rows else [(int(k), float(lr), float(m), int(b), kind) for k, lr, m, b, kind in
                                          (r.split(":") for r in args.rows.split(","))]
    columns = args.columns.split(",") if args.columns else COLUMNS
    rows = []
    for key in args.models.split(","):
        label, arch, kwargs, bn = MODELS[key]
        spec, model = make_model(arch, kwargs)
        for state in args.states.split(","):
            net = model.eval() if state == "random init" else train(model, spec, train_xy, epochs=1)
            acc_test = accuracy(net, spec, (px, py))
            for k, lr, mom, b, kind in settings:
                acc: dict[str, list[float]] = {c: [] for c in columns + READINGS}
                for t in range(args.first_trial, args.first_trial + args.trials):
                    tm, truth = client_update(spec, net, (px, py), t, k, b, lr, mom, kind, bn)
                    n_true, total = counts(truth, 10), k * b
                    observed = total * tm.output_grad("bias").double().cpu()
                    weights = torch.tensor(momentum_weights(k, mom), dtype=torch.float64)
                    weights = weights / weights.sum()

                    session = Session(seed=t, aux=aux)
                    for col in [c for c in ("global", "interpolate", "progress") if c in columns]:
                        r = LabelJob(session, tm, "rlu", {"trajectory": col}).result()
                        acc[col].append(label_metrics(r.counts_int, n_true)["InsAcc"])
                    idx = victims(py, b * k, kind, torch.Generator().manual_seed(1000 * t + k))  # client_update's draw
                    path = local_models(net, spec, px[idx], py[idx], k, b, lr, mom, bn)
                    per_step = torch.stack([counts(py[idx][j * b:(j + 1) * b], 10) for j in range(k)])
                    for name, v in path_readings(tm, path, per_step, mom, ax, ay).items():
                        acc[name].append(v)
                    acc["floor"].append(floor_of(truth)["InsAcc"])
                    if "true path" in columns:
                        acc["true path"].append(solved(mean_confidence(tm, path, weights, ax, ay), observed, n_true))
                    if "simulated, true counts" not in columns:
                        continue
                    g = torch.Generator().manual_seed(t)
                    labels = torch.repeat_interleave(torch.arange(10), n_true)
                    s_sim = torch.zeros(10, 10, dtype=torch.float64)
                    for _ in range(args.runs):
                        lab = labels[torch.randperm(total, generator=g)]
                        pick = torch.stack([pools[c][torch.randint(len(pools[c]), (1,), generator=g)][0] for c in lab.tolist()])
                        sim = local_models(net, spec, ax[pick], ay[pick], k, b, lr, mom, bn)
                        s_sim += mean_confidence(tm, sim, weights, ax, ay) / args.runs
                    acc["simulated, true counts"].append(solved(s_sim, observed, n_true))
                row = {"model": label, "state": state, "acc": acc_test, "K": k, "lr": lr, "momentum": mom, "B": b, "batch": kind,
                       "trials": args.trials, "InsAcc": {c: sum(v) / len(v) for c, v in acc.items() if c not in READINGS},
                       **{c: sum(acc[c]) / len(acc[c]) for c in READINGS}}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    write_results(args.out, "labels_trajectory", rows, markdown(rows))
    return 0


def markdown(rows: list[dict]) -> str:
    columns = [c for c in COLUMNS if rows and c in rows[0]["InsAcc"]]
    lines = ["RLU's InsAcc in % (mean over trials) with S taken at: the global model; the straight path at constant-"
             "gradient fractions; at simulated progress (the default); the client's true intermediate models (oracle); "
             "a simulated client on aux digits with the true counts (oracle). Step / final move: L1 change of S's "
             "columns after the first step / the whole update (of 2); off path: relative to |Delta|; momentum "
             "ceiling and floor: InsAcc in %.", "",
             "| model | state | acc | K | lr | momentum | B | batch | trials | " + " | ".join(columns + READINGS) + " |",
             "|---|---|---|---|---|---|---|---|---|" + "---|" * len(columns + READINGS)]
    for r in rows:
        head = [r["model"], r["state"], f"{100 * r['acc']:.0f}%", r["K"], r["lr"], r["momentum"], r["B"], r["batch"],
                r.get("trials", "")]
        lines.append("| " + " | ".join(map(str, head)) + " | "
                     + " | ".join(f"{100 * r['InsAcc'][c]:.0f}" for c in columns) + " | "
                     + " | ".join(f"{r[c]:.2f}" if "move" in c or c == "off path" else f"{100 * r[c]:.0f}"
                                  for c in READINGS) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
