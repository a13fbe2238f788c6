"""Leakage where FL really runs: pretrained backbones vs the same networks at random init, and the BN channel.

    .venv/bin/python -m benchmarks.pretrained_leakage --quick                       # smoke run
    .venv/bin/python -m benchmarks.pretrained_leakage --arch alexnet-imagenet --size 64 --batch 16 \\
        --attacks ig,fedleak,fedleak-paper,fedleak-dip,gradinversion,hfgi --iterations 2500 --json runs.json
    .venv/bin/python -m benchmarks.pretrained_leakage --summarize runs.json ...      # the markdown table
    .venv/bin/python -m benchmarks.pretrained_leakage --device cuda --save-images IMG ...   # on a GPU box, then here:
    .venv/bin/python -m benchmarks.pretrained_leakage --summarize runs.json --rescore IMG   # LPIPS/identification

One row = one architecture (pretrained or ``--random-weights``), image size and batch; each attack variant runs
on the same captured update with the same labels, at an equal iteration budget and (``--seconds S``) at an
equal wall-clock budget, and is scored against the truth (the attack never sees it): PSNR / SSIM / LPIPS after
one-to-one matching, the blank-image floor, the identification rate (fedaudit/metrics/identification.py), the
labels' InsAcc, seconds per iteration. Images: foolbox's 20 CIFAR-10 test images, then its 20 CIFAR-100 ones
(labels mod the class count) for B = 32, resized to the input size. Models with BatchNorm upload a FedAvg
K = 1 delta with their buffers (the BN channel); the others a FedSGD gradient. Writes ``--json``; the tables
live in docs/results/pretrained.md and benchmarks/results/pretrained_*.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from benchmarks.common import RESULTS, insacc, threat_model
from fedaudit.client.capture import CaptureConfig
from fedaudit.data.offline import foolbox_samples, imagenet_samples
from fedaudit.jobs import LabelJob, ReconstructJob, Session
from fedaudit.jobs.audit import LOOP_KEYS, parse_attack_options
from fedaudit.metrics.evaluate import evaluate_images
from fedaudit.models import ModelSpec
from fedaudit.models.build import initial_model, model_entry

PROBE = 20  # iterations run to size an equal-time budget ...
WARM = 5  # ... of which those after the first WARM are timed
SLACK = 1.25  # an equal-time run is stopped at this multiple of its seconds if the probe underestimated

# name -> (attack, options, loop settings)
FEDLEAK_PAPER = {"blend": 0.7, "look-ahead": "ascent", "tv": 1e-5, "act": 1e-4, "signed": False}
VARIANTS = {
    "ig": ("ig", {}, {}),
    "ig+bn": ("ig", {"bn-stats": "recovered", "bn": 0.01}, {}),
    "fedleak": ("fedleak", {}, {}),
    "fedleak-paper": ("fedleak", FEDLEAK_PAPER, {"lr": 1e-4, "schedule": "none"}),
    "fedleak-dip": ("fedleak-dip", {}, {}),
    "gradinversion": ("gradinversion", {}, {}),
    "hfgi": ("hfgi", {}, {}),
    "dlg": ("dlg", {}, {}),
}


def victim_images(b: int, shape: tuple[int, int, int], classes: int, source: str = "cifar") -> tuple[torch.Tensor, torch.Tensor]:
    if source == "imagenet":  # photographs at their own resolution, cropped and resized once (labels mod the classes)
        x, y, _ = imagenet_samples(shape[1])
        if b > len(x):
            raise SystemExit(f"only {len(x)} imagenet images for --batch {b}")
        return x[:b], y[:b] % classes
    x10, y10, _ = foolbox_samples("cifar10")
    x100, y100, _ = foolbox_samples("cifar100")
    x, y = torch.cat([x10, x100])[:b], (torch.cat([y10, y100 % classes]))[:b]
    if b > len(x):
        raise SystemExit(f"only {len(x)} public images for --batch {b}")
    x = torch.nn.functional.interpolate(x, size=shape[1:], mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)
    return x, y


def probe_cost(tm, attack: str, options: dict, loop: dict, labels: list[int], seed: int, device: str = "cpu") -> float:
    """Seconds per iteration in the steady state: the time from iteration WARM to PROBE of a short run, so the
    job's set-up and the first iterations' one-time costs (allocation, the first graph) are not spread over the
    budget (with them, a 28 ms/it attack once probed at 87 ms/it and got a third of its time)."""
    stamps: dict[int, float] = {}

    def clock(att, state, restart, it):
        stamps[it] = time.perf_counter()
        return False

    probe = ReconstructJob(Session.create(device, seed=seed), tm, attack, options, {**loop, "iterations": PROBE},
                           given_labels=labels, monitor=clock, monitor_every=1)
    probe.optimize(probe.build(labels), labels)
    return max((stamps[PROBE] - stamps[WARM]) / (PROBE - WARM), 1e-6)


def run_row(arch: str, size: int, b: int, pretrained: bool, variants: list[str], iterations: int, seconds: float | None,
            labels_from: str, seed: int, kwargs: dict | None = None, images: str = "cifar", device: str = "cpu",
            save_images: Path | None = None) -> list[dict]:
    entry = model_entry(arch)
    spec = ModelSpec(arch, 10, (3, size, size), entry.mean, entry.std, kwargs or {})
    torch.manual_seed(0)
    model, weights = initial_model(spec, pretrained=pretrained)
    x, y = victim_images(b, spec.input_shape, 10, images)
    has_bn = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    cfg = (CaptureConfig(batch_size=b, local_steps=1, lr=0.01, kind="delta", bn_mode="train") if has_bn
           else CaptureConfig(batch_size=b, bn_mode="eval"))
    tm = threat_model(spec, model.eval(), x, y, cfg)
    labels = y.tolist() if labels_from == "true" else LabelJob(Session.create(device, seed=seed), tm, "auto").result().labels
    rows = []
    for name in variants:
        attack, options, loop = VARIANTS[name]
        row = {"arch": arch + (f" {json.dumps(kwargs)}" if kwargs else ""), "size": size, "B": b, "state": "pretrained" if pretrained else "random init",
               "weights": weights, "variant": name, "attack": attack, "seed": seed, "labels": labels_from, "images": images,
               "labels_insacc": insacc(labels, y), "budget_s": seconds}
        stop = {"t0": 0.0}

        def monitor(att, state, restart, it, stop=stop):  # a safety net: the budget is sized to `seconds`
            return seconds is not None and time.perf_counter() - stop["t0"] > SLACK * seconds

        budget = iterations
        if seconds is not None:  # equal time: the iterations this attack runs in `seconds`, so its schedule completes
            budget = max(PROBE, min(iterations, int(seconds / probe_cost(tm, attack, options, loop, labels, seed, device))))
        job = ReconstructJob(Session.create(device, seed=seed), tm, attack, options, {**loop, "iterations": budget},
                             given_labels=labels, monitor=monitor, monitor_every=10 if seconds else 0)
        try:
            a = job.build(labels)
        except Exception as exc:  # noqa: BLE001 - e.g. not applicable: recorded in the row
            rows.append({**row, "error": str(exc)})
            continue
        stop["t0"] = time.perf_counter()
        r = job.optimize(a, labels)
        if save_images is not None:  # to score LPIPS/identification elsewhere (a GPU box may lack their weights)
            save_images.mkdir(parents=True, exist_ok=True)
            row["images_file"] = (f"{arch}_{'pretrained' if pretrained else 'random'}_{size}px_B{b}_{name}_s{seed}_"
                                  f"{r.iterations_run}it.safetensors")
            save_file({"recon": r.images.detach().cpu().contiguous(), "truth": x.contiguous()},
                      str(save_images / row["images_file"]))
        row.update(device=str(job.session.device), cuda_graph=getattr(r, "cuda_graph", None))
        row.update(iterations=r.iterations_run, seconds=round(r.seconds, 1), s_per_iter=r.seconds / max(r.iterations_run, 1),
                   **image_scores(r.images.cpu(), x, arch), movement=r.movement,
                   settings=job.settings, options={k: v for k, v in job.options.items() if k in options})
        rows.append(row)
        print(f"{arch} {row['state']} {size}px B={b} {name}: {row['psnr']:.2f} dB (floor {row['floor']:.2f}), "
              f"SSIM {row['ssim']:.3f}, identified {row['identified']}/{row['of']}, {r.iterations_run} it, "
              f"{1000 * row['s_per_iter']:.0f} ms/it", file=sys.stderr, flush=True)
    return rows


def image_scores(recon: torch.Tensor, truth: torch.Tensor, arch: str) -> dict:
    """A row's image metrics (fedaudit/metrics/evaluate.py) against the truth: PSNR/SSIM/LPIPS means, the blank-image
    floor, identification, band."""
    m = evaluate_images(recon, truth, attacked_arch=arch)
    ident = m["identification"]
    return dict(psnr=m["summary"]["psnr"]["mean"], ssim=m["summary"]["ssim"]["mean"],
                lpips=(m["summary"]["lpips"] or {}).get("mean"), floor=m["blank_baseline"]["floor"]["psnr"],
                above_floor=m["psnr_above_blank"], identified=ident.get("identified"), of=ident.get("of"),
                ident_net=ident.get("net"), risk_band=m["risk_band"])


def rescore(rows: list[dict], folders: list[Path]) -> list[dict]:
    """Rows whose saved reconstruction (``images_file``, from ``--save-images``) is in one of ``folders``, scored
    again here: LPIPS, identification and the band need backbone weights a GPU box may not have."""
    for row in rows:
        found = [f / row["images_file"] for f in folders if row.get("images_file") and (f / row["images_file"]).exists()]
        if not found:
            continue
        saved = load_file(str(found[0]))
        row.update(image_scores(saved["recon"], saved["truth"], row["arch"].split(" ")[0]))
    return rows


def _f(v, fmt="{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def summarize(rows: list[dict]) -> str:
    lines = ["| model | state | px | B | labels InsAcc | attack | budget | iterations | PSNR (floor) | SSIM | LPIPS | identified | band | ms/it |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        model = r["arch"] + (" (ImageNet photos)" if r.get("images") == "imagenet" else "")
        head = f"| {model} | {r['state']} | {r['size']} | {r['B']} | {r['labels_insacc']:.2f} | {r['variant']} |"
        if "error" in r:
            lines.append(f"{head} - | - | {r['error']} ||||||")
            continue
        budget = f"{r['budget_s']:.0f} s" if r.get("budget_s") else f"{r['iterations']} it"
        lines.append(f"{head} {budget} | {r['iterations']} | "
                     f"{r['psnr']:.2f} ({r['floor']:.2f}) | {r['ssim']:.3f} | {_f(r['lpips'], '{:.3f}')} | "
                     f"{r['identified']}/{r['of']} | {r['risk_band']} | {1000 * r['s_per_iter']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="AlexNet at 32 px, B = 2, 20 iterations, two attacks")
    ap.add_argument("--arch", default="alexnet-imagenet", help="comma list")
    ap.add_argument("--arch-kwargs", type=json.loads, default=None, help="JSON architecture options, e.g. '{\"width\": 16}'")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", default="16", help="comma list of batch sizes")
    ap.add_argument("--state", default="pretrained,random", help="pretrained, random or both")
    ap.add_argument("--attacks", default="ig,fedleak,fedleak-paper,fedleak-dip,gradinversion,hfgi")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=SPEC",
                    help="an extra variant, e.g. 'fl-lr03=fedleak:lr=0.03:schedule=step' (options and loop settings); repeatable")
    ap.add_argument("--iterations", type=int, default=2500)
    ap.add_argument("--seconds", type=float, help="wall-clock budget per attack (equal time): each attack runs the "
                    "iterations a 20-iteration probe says fit, capped by --iterations, so its schedule completes")
    ap.add_argument("--labels", choices=("auto", "true"), default="auto")
    ap.add_argument("--images", choices=("cifar", "imagenet"), default="cifar",
                    help="victims: foolbox's CIFAR-10 then CIFAR-100 test images, or its 20 ImageNet photographs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    ap.add_argument("--save-images", type=Path, help="also write each reconstruction (and the truth) here as safetensors")
    ap.add_argument("--json", type=Path, help="append the rows to this file")
    ap.add_argument("--summarize", type=Path, nargs="+", help="print the table of these JSON files and stop")
    ap.add_argument("--rescore", type=Path, nargs="*", default=[], metavar="DIR",
                    help="with --summarize: score the rows' saved reconstructions in these folders again here")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.summarize:
        rows = rescore([r for f in args.summarize for r in json.loads(f.read_text())], args.rescore)
        print(summarize(rows))
        return 0
    torch.set_num_threads(args.threads)
    for item in args.variant:
        name, spec = item.split("=", 1)
        attack = spec.split(":")[0]
        given = parse_attack_options([spec])[attack]
        loop = {k: given.pop(k) for k in LOOP_KEYS if k in given}
        VARIANTS[name] = (attack, given, loop)
    if args.quick:
        args.arch, args.size, args.batch, args.attacks, args.iterations = "alexnet-imagenet", 32, "2", "ig,fedleak", 20
    rows = []
    for arch in args.arch.split(","):
        for b in (int(v) for v in args.batch.split(",")):
            for state in args.state.split(","):
                new = run_row(arch, args.size, b, state == "pretrained", args.attacks.split(","), args.iterations,
                              args.seconds, args.labels, args.seed, args.arch_kwargs, args.images,
                              args.device, args.save_images)
                rows += new
                if args.json:  # after every row, so a long queue that is stopped keeps what it finished
                    old = json.loads(args.json.read_text()) if args.json.exists() else []
                    args.json.write_text(json.dumps(old + new, indent=1))
    print(summarize(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
