"""What hidden-split's rank test checks of a label: per verified sample, whether its label is right, which other
labels the rank test would pass too, and its score of the three conditions (docs/methods/labels.md, hidden-split).

    PYTHONPATH=. .venv/bin/python -m benchmarks.hidden_split_labels --models flower-cnn --B 32,48
    PYTHONPATH=. .venv/bin/python -m benchmarks.hidden_split_labels --summary benchmarks/results/hidden_split_labels.jsonl

Batches as ``benchmarks.labels_split_threshold`` draws them (UCI digits by default, batch seed 2, random, repeated
and single-class batches, trained models), read by hidden-split alone with its batch cap out of the way (it is
``auto``'s, not the method's). A verified sample's label is scored against the true sample whose split-layer input
is nearest its recovered input (by cosine; the row keeps that cosine). Rows: one per batch, each verification of the
layer hidden-split kept with its label, the true one, the labels passing the rank test and the scores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from unittest import mock

import torch

from benchmarks.common import RESULTS
from benchmarks.labels import data
from benchmarks.labels_split_threshold import held_out_batches
from benchmarks.records import jsonl_rows
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.labels import hidden_split
from fedaudit.models.normalize import normalize


class _TracedPeel(hidden_split._Peel):
    """hidden-split's peel with its trace on; every one made is kept, in order, for the benchmark to read."""

    made: list["_TracedPeel"] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trace = []
        _TracedPeel.made.append(self)


def layer_inputs(tm, images: torch.Tensor, layer: str) -> torch.Tensor:
    """The true samples' inputs of ``layer`` (B x in_features), through the model as the client ran it."""
    seen: dict[str, torch.Tensor] = {}
    module = dict(tm.model.named_modules())[layer]
    hook = module.register_forward_hook(lambda m, i, o: seen.__setitem__("x", i[0].detach().double()))
    try:
        tm.model.train(tm.train_bn)
        with torch.no_grad():
            tm.model(normalize(images, tm.spec))
    finally:
        hook.remove()
        tm.model.eval()
    return seen["x"].flatten(1)


def read_batch(tm, images: torch.Tensor, labels: torch.Tensor, seed: int, aux: Aux, options: dict | None = None
               ) -> dict:
    """hidden-split (its defaults, or ``options``) on one batch: its kept layer and, per verification there, the
    label against the truth."""
    _TracedPeel.made = []
    with mock.patch.object(hidden_split, "_Peel", _TracedPeel):
        r = LabelJob(Session(seed=seed, aux=aux), tm, "hidden-split", options or {}).result()
    kept = max(_TracedPeel.made, key=lambda p: len(p.labels))  # the layer verifying the most (the first on ties)
    truth = layer_inputs(tm, images, r.diagnostics["layer"])
    rows = []
    for step in kept.trace or []:
        cos = torch.nn.functional.cosine_similarity(truth, step["input"][None, :-1], dim=1)
        j = int(cos.argmax())
        rows.append({"label": step["label"], "true": int(labels[j]), "cos": float(cos[j]), "scores": step["scores"],
                     "passing": step["passing"], "growth": step["growth"]})
    return {"layer": r.diagnostics["layer"], "resolved": r.diagnostics["resolved"], "verified": rows}


def summary(rows: list[dict]) -> str:
    """Per model and B: verified samples, wrong labels, how many had another (every) label passing the rank test,
    and the wrong labels' score range with the right ones inside it."""
    lines = ["| model | B | batches | verified | wrong | another label passes | every label passes | wrong labels' "
             "scores | right ones inside |", "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted({(r["model"], r["B"]) for r in rows}):
        cell = [v for r in rows if (r["model"], r["B"]) == key for v in r["verified"]]
        wrong = [v["scores"][v["label"]] for v in cell if v["label"] != v["true"]]
        right = [v["scores"][v["label"]] for v in cell if v["label"] == v["true"]]
        span = f"{min(wrong):.1e} .. {max(wrong):.1e}" if wrong else "-"
        inside = sum(min(wrong) <= s <= max(wrong) for s in right) if wrong else 0
        n_classes = max((len(v["scores"]) for v in cell), default=0)
        lines.append(f"| {key[0]} | {key[1]} | {sum((r['model'], r['B']) == key for r in rows)} | {len(cell)} | "
                     f"{len(wrong)} | {sum(len(v['passing']) > 1 for v in cell)} | "
                     f"{sum(len(v['passing']) == n_classes for v in cell)} | {span} | {inside} of {len(right)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", choices=["mnist", "digits"], default="digits")
    ap.add_argument("--batch-seed", type=int, default=2)
    ap.add_argument("--models", default="flower-cnn")
    ap.add_argument("--B", default="32,48", help="comma list of batch sizes")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS / "hidden_split_labels.jsonl")
    ap.add_argument("--summary", type=Path, help="print the summary of a stored JSONL file and exit")
    args = ap.parse_args(argv)
    if args.summary:
        print(summary(jsonl_rows(args.summary)))
        return 0
    torch.set_num_threads(args.threads)
    train_xy, (ax, ay), (px, py) = data(dataset=args.data)
    aux = Aux(ax, ay, "images")
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        for label, b, dist, t, idx, tm in held_out_batches(args.models, args.B, args.trials, args.batch_seed,
                                                            train_xy, (px, py)):
            row = {"data": args.data, "model": label, "B": b, "dist": dist, "trial": t,
                   **read_batch(tm, px[idx], py[idx], t, aux)}
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            wrong = sum(v["label"] != v["true"] for v in row["verified"])
            print(f"{label} B={b} {dist} t={t}: {len(row['verified'])} verified, {wrong} wrong", file=sys.stderr,
                  flush=True)
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
