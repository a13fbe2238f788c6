"""Every model a reviewer brings: torchvision's classification builders through the whole command line, as a new user
would run them (issue 87). For each builder at random init and 10 classes, at its smallest legal input:

1. its ``state_dict`` saved with ``safetensors.torch.save_file`` and wrapped by ``fedaudit import checkpoint``;
2. ``capture`` of one CIFAR-10 photograph (B = 1; BatchNorm in eval mode, as a B = 1 client must);
3. ``inspect``; 4. ``labels auto``; 5. ``reconstruct ig -n 20 --proxies 1 --truth``; 6. ``score``.

Each step is a subprocess with a time limit (``--step-seconds``); its exit code, seconds and first stderr line are
recorded. Rows go to ``benchmarks/results/model_zoo.jsonl`` (resumable) and ``--table`` writes docs/results/models.md.

    .venv/bin/python -m benchmarks.model_zoo                      # every builder (CPU: hours for the largest)
    .venv/bin/python -m benchmarks.model_zoo --models resnet18,mobilenet_v3_small
    .venv/bin/python -m benchmarks.model_zoo --table > docs/results/models.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import RESULTS

ROOT = Path(__file__).resolve().parents[1]
OUT = RESULTS / "model_zoo.jsonl"
# builder -> smallest legal square input (the CPU-sized set the issue names; the ViT and Swin need their own)
BUILDERS = {"resnet18": 32, "resnet50": 32, "resnext50_32x4d": 32, "wide_resnet50_2": 32, "mobilenet_v2": 32,
            "mobilenet_v3_small": 32, "mobilenet_v3_large": 32, "efficientnet_b0": 32, "efficientnet_v2_s": 32,
            "mnasnet0_5": 32, "shufflenet_v2_x0_5": 32, "squeezenet1_1": 32, "regnet_x_400mf": 32,
            "regnet_y_400mf": 32, "densenet121": 32, "convnext_tiny": 32, "googlenet": 32, "vit_b_16": 224,
            "swin_t": 32}
STEPS = ("import", "capture", "inspect", "labels", "reconstruct", "score")
TRUTH_SOURCE = ROOT / "sample_updates" / "lenet_b1" / "truth.safetensors"


def _run(args: list[str], limit: float) -> dict:
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "fedaudit", *args], cwd=ROOT, capture_output=True, text=True,
                           timeout=limit, env={**os.environ, "FEDAUDIT_PROGRESS": "off"})
        code, err = p.returncode, p.stderr.strip().splitlines()
    except subprocess.TimeoutExpired:
        code, err = None, [f"over the {limit:.0f} s step limit"]
    line = next((ln for ln in err if ln.startswith("fedaudit: error") or "not applicable" in ln), err[-1] if err else "")
    return {"exit": code, "seconds": round(time.perf_counter() - t0, 1), "message": line[:300]}


def zoo_row(name: str, side: int, limit: float, trained: bool = False, iterations: int = 20, proxies: int = 1) -> dict:
    """One builder through every step; a step after a failed one is skipped (its input does not exist).
    ``trained``: one epoch of Adam on 4,000 MNIST digits first (benchmarks.common.trained; 32 px inputs only)."""
    import torch
    import torchvision
    from safetensors.torch import save_file

    row: dict = {"model": name + (" (1 epoch on MNIST digits)" if trained else ""), "input": side, "steps": {},
                 "iterations": iterations, "proxies": proxies}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None, num_classes=10)
        if trained:
            from benchmarks.common import trained as train
            from fedaudit.models import ModelSpec

            model = train(model, ModelSpec(f"torchvision.{name}", 10, (3, side, side), (0.5,), (0.5,)))
        row["parameters"] = sum(p.numel() for p in model.parameters())
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, d / "state.safetensors")
        truth = d / "truth.safetensors"
        if side != 32:  # the sample's photograph at the model's input side
            from fedaudit.io.truth import Truth, load_truth, save_truth

            t = load_truth(TRUTH_SOURCE)
            x = torch.nn.functional.interpolate(t.images, size=(side, side), mode="bilinear", align_corners=False)
            save_truth(truth, Truth(x.clamp(0, 1).contiguous(), t.labels, t.step, t.names))
        else:
            truth = TRUTH_SOURCE
        ck, upd, capt, out = d / "ck.safetensors", d / "u.safetensors", d / "t.safetensors", d / "out"
        plan = {
            "import": ["import", "checkpoint", str(d / "state.safetensors"), "--arch", f"torchvision.{name}",
                       "--input-shape", f"3,{side},{side}", *(["--mean", "0.5", "--std", "0.5"] if trained else []), "-o",
                       str(ck), "-q"],
            "capture": ["capture", str(ck), str(truth), "-b", "1", "--bn-mode", "eval", "-o", str(upd),
                        "--truth-out", str(capt), "-q"],
            "inspect": ["inspect", str(ck), str(upd)],
            "labels": ["labels", "auto", str(ck), str(upd), "-q"],
            "reconstruct": ["reconstruct", "ig", str(ck), str(upd), "-o", str(out), "-n", str(iterations), "--proxies", str(proxies),
                            "--truth", str(capt), "-q"],
            "score": ["score", str(out / "reconstruction.safetensors"), "--truth", str(capt), "-o", str(d / "scored"),
                      "-q"],
        }
        failed = False
        for step in STEPS:
            if failed:
                row["steps"][step] = {"exit": None, "seconds": 0.0, "message": "skipped: an earlier step failed"}
                continue
            row["steps"][step] = r = _run(plan[step], limit)
            failed = r["exit"] != 0 and step in ("import", "capture", "reconstruct")
        if (out / "report.json").exists():
            rep = json.loads((out / "report.json").read_text())
            m = rep.get("metrics") or {}
            row["measured"] = {"band": m.get("risk_band"), "range": m.get("risk_band_range"),
                               "estimated": (rep.get("evidence") or {}).get("verdict", {}).get("band"),
                               "estimated_range": (rep.get("evidence") or {}).get("verdict", {}).get("range"),
                               "psnr_above_floor": m.get("psnr_above_blank"),
                               "identification": m.get("identification"),
                               "warnings": (rep.get("attack") or {}).get("warnings", [])}
    return row


def table(rows: list[dict]) -> str:
    ok = sum(all(s["exit"] == 0 for s in r["steps"].values()) for r in rows)
    exit3 = sum(any(s["exit"] == 3 for s in r["steps"].values()) for r in rows)
    lines = ["# Every model a reviewer brings: torchvision's classifiers through the command line", "",
             "`python -m benchmarks.model_zoo` (issue 87): each builder at random init, 10 classes, its smallest "
             "legal input, B = 1 (one CIFAR-10 photograph), CPU. Each cell: exit code and seconds.", "",
             f"{len(rows)} builders: {ok} ran every step to a verdict; {exit3} had an exit 3 in some step.", "",
             "| model | params | input | " + " | ".join(STEPS) + " | measured band | note |",
             "|---|---|---|" + "---|" * len(STEPS) + "---|---|"]
    for r in rows:
        cells = [f"{s['exit'] if s['exit'] is not None else '-'} ({s['seconds']:.0f} s)" for s in
                 (r["steps"][k] for k in STEPS)]
        notes = [s["message"] for s in r["steps"].values() if s["exit"] not in (0, None) and s["message"]]
        m = r.get("measured") or {}
        band = f"{m.get('band')} {m.get('range')}" if m.get("band") else "-"
        lines.append(f"| {r['model']} | {r['parameters'] / 1e6:.1f}M | {r['input']} | " + " | ".join(cells) +
                     f" | {band} | {'; '.join(notes)[:200].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(BUILDERS))
    ap.add_argument("--step-seconds", type=float, default=900.0)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--trained", action="store_true", help="one epoch on MNIST digits before the steps (32 px)")
    ap.add_argument("--iterations", type=int, default=20, help="reconstruct ig's -n")
    ap.add_argument("--proxies", type=int, default=1, help="reconstruct ig's --proxies")
    args = ap.parse_args(argv)
    if args.table:
        print(table([json.loads(line) for line in args.out.read_text().splitlines()]))
        return 0
    done = {json.loads(line)["model"] for line in args.out.read_text().splitlines()} if args.out.exists() else set()
    for name in args.models.split(","):
        if name + (" (1 epoch on MNIST digits)" if args.trained else "") in done:
            continue
        row = zoo_row(name, BUILDERS.get(name, 32), args.step_seconds, args.trained, args.iterations, args.proxies)
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(name, {k: v["exit"] for k, v in row["steps"].items()}, file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
