"""Held-out check of the thresholds that keep a split route's answer in ``auto``: SPLIT_MAX_FIT (sample-split kept
where its fit is at most this), HIDDEN_MIN_RESOLVED (hidden-split kept where it verified at least this share of
the batch) and HIDDEN_MAX_BATCH (hidden-split tried on batches of at most this many; ``--lift-cap`` runs it on every
batch and records the verified samples whose label is wrong). On batches a threshold was not chosen on (another image
source, other batches), each batch is read by ``auto`` with the route kept and with it never kept, so that any
threshold's reading of the batch is known: the split's answer where the threshold keeps it, the route below otherwise.

    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_split_threshold --data digits --batch-seed 2
    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_split_threshold --route hidden-split --models mlp-bias --B 8,16,32
    PYTHONPATH=. .venv/bin/python -m benchmarks.labels_split_threshold --route hidden-split --lift-cap \
        --models flower-cnn --B 16,48,64        # models the main table does not train: flower-cnn, mlp-narrow

Both were chosen on benchmarks.labels' main table (MNIST, batch seed 0): sample-split's final fits 1e-9 to 1e-4,
failed searches 1e-2 to 1e-1; hidden-split verified 34-100% at B = 16-32, 23-50% at 64. Writes
OUT/labels_split_threshold[_hidden[_uncapped]]_<data>_batches<N>.jsonl (one line per batch) and prints InsAcc per threshold with
the paired difference to the shipped one (docs/results/labels.md, "sample-split", "hidden-split").
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch

from benchmarks.common import RESULTS, threat_model
from benchmarks.labels import DISTS, FEDSGD_MODELS, cell_batches, data, make_model, train
from fedaudit.client.capture import CaptureConfig
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.labels.auto_routes import split
from fedaudit.metrics.labels import counts, label_metrics


@dataclass(frozen=True)
class Route:
    method: str
    constant: str  # its threshold's name in fedaudit.labels.auto_routes.split
    key: str  # the method's diagnostic the threshold reads
    never: float  # a threshold value that never keeps the answer
    thresholds: tuple[float, ...]

    def value(self, diagnostics: dict, b: int) -> float:
        """The number the threshold is compared with: the fit, or the share of the batch verified."""
        return float(diagnostics[self.key]) / (b if self.key == "resolved" else 1)

    def keeps(self, value: float, threshold: float) -> bool:
        return value <= threshold if self.key == "fit" else value >= threshold


# hidden-layer families the main table does not train (held out for hidden-split's batch cap): Flower's quickstart CNN
# (conv stack, then 400 -> 120 -> 84 -> 10) and a narrower MLP than mlp-bias's [256, 128]
HELD_OUT_MODELS = {
    "flower-cnn": ("flower-cnn", "flower-cnn", {}, None, 2),
    "mlp-narrow": ("mlp [128, 64]", "mlp", {"hidden": [128, 64]}, None, 2),
}

ROUTES = {"sample-split": Route("sample-split", "SPLIT_MAX_FIT", "fit", -1.0, (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, float("inf"))),
          "hidden-split": Route("hidden-split", "HIDDEN_MIN_RESOLVED", "resolved", 2.0, (0.0, 0.25, 0.5, 0.75, 1.0))}


def held_out_batches(models: str, sizes: str, trials: int, batch_seed: int, train_xy, pool):
    """Each batch the held-out checks read: (model label, B, distribution, trial, indices into ``pool``, its threat
    model), for each model of ``models`` (comma list of FEDSGD_MODELS and HELD_OUT_MODELS keys, trained on
    ``train_xy`` for as many steps as the main table's epochs of 3,500 MNIST digits), each B of ``sizes`` (comma
    list), each distribution and ``trials`` batches drawn with ``batch_seed``; FedSGD, BN in train mode."""
    px, py = pool
    epoch_scale = round(3500 / len(train_xy[1]))
    for key in models.split(","):
        label, arch, kwargs, head_init, epochs = {**FEDSGD_MODELS, **HELD_OUT_MODELS}[key]
        spec, init_model = make_model(arch, kwargs, head_init=head_init)
        model = train(init_model, spec, train_xy, epochs * epoch_scale)
        for b in [int(v) for v in sizes.split(",")]:
            for dist in DISTS:
                for t, idx in enumerate(cell_batches(py, b, dist, trials, batch_seed)):
                    yield label, b, dist, t, idx, threat_model(spec, model, px[idx], py[idx],
                                                               CaptureConfig(batch_size=b, bn_mode="train"))
        print(f"{label}: done", file=sys.stderr, flush=True)


def read_twice(tm, truth, seed: int, aux: Aux, route: Route) -> dict:
    """The split's value and reading (where it ran), and auto's reading with the route never kept."""
    session = Session(seed=seed, aux=aux)
    b = int(truth.sum())
    shipped = LabelJob(session, tm, "auto").result()
    d = shipped.diagnostics
    row: dict = {"chosen": d["chosen"], "shipped": label_metrics(shipped.counts_int, truth)["InsAcc"]}
    noted = d.get(route.method.replace("-", "_"))
    if d["chosen"] == route.method:
        row.update(value=route.value(d, b), split=row["shipped"])
        with mock.patch.object(split, route.constant, route.never):
            below = LabelJob(session, tm, "auto").result()
        row.update(below=label_metrics(below.counts_int, truth)["InsAcc"], below_chosen=below.diagnostics["chosen"])
    elif noted is not None:  # ran and was not kept: the shipped reading is the route below
        row.update(value=route.value(noted, b), split=label_metrics(torch.tensor(noted["counts"]), truth)["InsAcc"],
                   below=row["shipped"], below_chosen=d["chosen"])
    ran = d if d["chosen"] == route.method else noted or {}
    if "exact_counts" in ran:  # hidden-split: its layer's width and the verified samples whose label is wrong
        exact = torch.tensor(ran["exact_counts"])
        row.update(layer=ran["layer"], width=dict(tm.model.named_modules())[ran["layer"]].out_features,
                   wrong=int((exact - torch.minimum(exact, truth.to(exact.dtype))).sum()))
    return row


def summary(rows: list[dict], route: Route = ROUTES["sample-split"]) -> str:
    """InsAcc per threshold over the batches the split ran on, and the paired difference to the shipped threshold."""
    ran = [r for r in rows if "value" in r]
    if not ran:
        return f"no batch went to {route.method}"
    shipped = getattr(split, route.constant)

    def reading(r, t):
        return r["split"] if route.keeps(r["value"], t) else r["below"]

    lines = [f"{len(ran)} of {len(rows)} batches went to {route.method} ({route.key} {min(r['value'] for r in ran):.1e}"
             f" .. {max(r['value'] for r in ran):.1e})", "| threshold | kept | InsAcc | vs shipped |", "|---|---|---|---|"]
    for t in route.thresholds:
        diff = torch.tensor([reading(r, t) - reading(r, shipped) for r in ran], dtype=torch.float64)
        se = float(diff.std() / len(diff) ** 0.5) if len(diff) > 1 else 0.0
        acc = sum(reading(r, t) for r in ran) / len(ran)
        kept = sum(route.keeps(r["value"], t) for r in ran)
        lines.append(f"| {t:g} | {kept} | {100 * acc:.1f}% | {100 * float(diff.mean()):+.1f} +- {100 * se:.1f} |")
    return "\n".join(lines)


def cap_summary(rows: list[dict]) -> str:
    """hidden-split with its batch cap lifted (``--lift-cap``), per model and B: the batches it ran on, the samples it
    verified and how many of those have a wrong label, the batches HIDDEN_MIN_RESOLVED keeps, and InsAcc with the
    cap lifted against the shipped cap (HIDDEN_MAX_BATCH: above it the route below reads every batch)."""
    cap, share = split.HIDDEN_MAX_BATCH, split.HIDDEN_MIN_RESOLVED
    lines = ["| model | B | batches | ran | verified | wrong | kept | InsAcc, cap lifted | InsAcc, cap |",
             "|---|---|---|---|---|---|---|---|---|"]
    for model, b in sorted({(r["model"], r["B"]) for r in rows}, key=lambda mb: (mb[0], mb[1])):
        cell = [r for r in rows if (r["model"], r["B"]) == (model, b)]
        ran = [r for r in cell if "value" in r]
        kept = [r for r in ran if r["value"] >= share]
        lifted = [r["split"] if r in kept else r.get("below", r["shipped"]) for r in cell]
        capped = lifted if b <= cap else [r.get("below", r["shipped"]) for r in cell]
        verified = sum(round(r["value"] * b) for r in ran)
        lines.append(f"| {model} | {b} | {len(cell)} | {len(ran)} | {verified} | {sum(r.get('wrong', 0) for r in ran)} "
                     f"| {len(kept)} | {100 * sum(lifted) / len(cell):.1f}% | {100 * sum(capped) / len(cell):.1f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--route", choices=list(ROUTES), default="sample-split")
    ap.add_argument("--data", choices=["mnist", "digits"], default="digits")
    ap.add_argument("--batch-seed", type=int, default=2)
    ap.add_argument("--models", default="lenet,lenet-torch,convnet,resnet10")
    ap.add_argument("--B", default="8", help="comma list of batch sizes")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--summary", type=Path, help="print the summary of a stored JSONL file (with --lift-cap: the cap's) "
                    "and exit")
    ap.add_argument("--lift-cap", action="store_true",
                    help="hidden-split: lift its batch cap (HIDDEN_MAX_BATCH) so that it runs at every B; the rows "
                         "record the split layer's width and the verified samples whose label is wrong")
    args = ap.parse_args(argv)
    route = ROUTES[args.route]
    if args.summary:
        stored = [json.loads(line) for line in args.summary.read_text().splitlines()]
        print(cap_summary(stored) if args.lift_cap else summary(stored, route))
        return 0
    torch.set_num_threads(2)
    train_xy, (ax, ay), (px, py) = data(dataset=args.data)
    aux = Aux(ax, ay, "images")
    tag = "" if args.route == "sample-split" else "_hidden"
    if args.lift_cap:
        split.HIDDEN_MAX_BATCH = 10**9
        tag += "_uncapped"
    path = args.out / f"labels_split_threshold{tag}_{args.data}_batches{args.batch_seed}.jsonl"
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with path.open("w") as f:
        for label, b, dist, t, idx, tm in held_out_batches(args.models, args.B, args.trials, args.batch_seed,
                                                            train_xy, (px, py)):
            row = {"model": label, "B": b, "dist": dist, "trial": t,
                   **read_twice(tm, counts(py[idx], 10), t, aux, route)}
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
    print(cap_summary(rows) if args.lift_cap else summary(rows, route))
    return 0


if __name__ == "__main__":
    sys.exit(main())
