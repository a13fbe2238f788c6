"""Round-audit throughput: ``audit-round`` over N recorded clients (labels + IG 200 iterations each) with -j 1,
-j 2 and Ray's local mode on this machine.

    .venv-fl/bin/python -m benchmarks.audit_round                 # 64 clients; Ray rows need the [ray] extra
    .venv-fl/bin/python -m benchmarks.audit_round --clients 8 --engines j1   # smoke run

Clients: LeNet (DLG init, 3 x 32 x 32, MNIST normalisation) weights after one SGD step (lr 0.1) on 4 digits each,
recorded as the Flower recorder writes them (one global checkpoint, clients/<name>.safetensors). Every engine runs
the same command into a fresh output folder (the CLI in a subprocess, so process start-up and imports count);
label accuracy is checked against each client's batch. Writes benchmarks/results/audit_round.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from benchmarks.common import RESULTS
from fedaudit.client.capture import CaptureConfig, capture_update
from fedaudit.data.offline import MNIST_MEAN, MNIST_STD, mnist_digits
from fedaudit.io.checkpoint import save_checkpoint
from fedaudit.io.update import save_update
from fedaudit.models import ModelSpec, build_model

SPEC = ModelSpec("lenet", 10, (3, 32, 32), MNIST_MEAN * 3, MNIST_STD * 3)


def engine_args(name: str) -> list[str]:
    """The CLI flags of an engine: ``jN`` (N spawned processes), ``ray`` (a local Ray), each with an optional
    ``@DEVICE`` (``j8@cuda``: eight processes sharing the GPU; default: the CLI's ``--device auto``)."""
    engine, _, device = name.partition("@")
    if engine == "ray":
        flags = ["--ray", "-j", "2"]
    elif engine.startswith("j") and engine[1:].isdigit():
        flags = ["-j", engine[1:]]
    else:
        raise SystemExit(f"unknown engine {name!r} (jN, ray, each with an optional @cpu / @cuda)")
    return flags + (["--device", device] if device else [])


def make_round(folder: Path, clients: int, batch: int = 4) -> dict[str, list[int]]:
    x, y = mnist_digits(pad_to=32)
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[idx].expand(-1, 3, -1, -1).contiguous(), y[idx]
    torch.manual_seed(0)
    model = build_model(SPEC)
    (folder / "clients").mkdir(parents=True)
    save_checkpoint(folder / "checkpoint.safetensors", model, SPEC)
    truth = {}
    for c in range(clients):
        sl = slice(batch * c, batch * (c + 1))
        cap = capture_update(model, SPEC, x[sl], y[sl], CaptureConfig(batch_size=batch, kind="weights", lr=0.1))
        save_update(folder / "clients" / f"client{c:03d}.safetensors", cap.tensors, cap.meta)
        truth[f"client{c:03d}"] = sorted(y[sl].tolist())
    save_file({"images": x[4000:4200].contiguous(), "labels": y[4000:4200]}, str(folder.parent / "aux.safetensors"))
    return truth


def write(rows: list[dict], args) -> str:
    """The rows so far as OUT/audit_round.json and .md; returns the markdown table."""
    base = next((r["wall_s"] for r in rows if r.get("engine", "").partition("@")[0] == "j1" and "wall_s" in r), None)
    lines = [f"# audit-round throughput ({args.clients} clients, labels + IG {args.iterations} iterations each)", "",
             f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads available"
             + (f"; GPU: {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "")
             + "; the CLI in a subprocess (start-up included).", "",
             "| engine | wall (s) | s / client | speed-up vs -j 1 | labels exact |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['engine']} | error: {r['error']} | | | |")
            continue
        speed = f"{base / r['wall_s']:.2f}x" if base else "-"
        lines.append(f"| {r['engine']} | {r['wall_s']} | {r['s_per_client']} | {speed} | {r['labels_exact']}/{r['clients']} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "audit_round.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / "audit_round.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--engines", default="j1,j2,ray", help="comma list of jN / ray, each with an optional @DEVICE "
                    "(a GPU machine: j1@cuda,j4@cuda,j8@cuda,j8@cpu)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--make-round", type=Path, metavar="DIR", help="only write a demo round (the recorder's layout: "
                    "DIR/checkpoint.safetensors, DIR/clients/*.safetensors) of --clients clients, and public digits "
                    "beside it (DIR/../aux.safetensors), then exit")
    args = ap.parse_args(argv)
    if args.make_round:
        if args.make_round.exists():
            raise SystemExit(f"{args.make_round} exists")
        make_round(args.make_round, args.clients)
        print(f"wrote {args.clients} clients to {args.make_round}/ and public digits to "
              f"{args.make_round.parent / 'aux.safetensors'}", file=sys.stderr)
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        truth = make_round(root / "round", args.clients)
        for name in args.engines.split(","):
            out = root / f"out_{name}"
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "fedaudit", "audit-round", str(root / "round"), "-o", str(out),
                                   "-n", str(args.iterations), "--aux", str(root / "aux.safetensors"), "-q",
                                   "--fail-on", "never", *engine_args(name)], capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                summary = out / "audit_round.json"  # the first failed client's traceback, where one was kept
                failed = [c for c in json.loads(summary.read_text()).get("clients", []) if c.get("traceback")] \
                    if summary.is_file() else []
                rows.append({"engine": name, "error": (proc.stderr.strip().splitlines() or [""])[-1][:300],
                             "traceback": failed[0]["traceback"] if failed else None})
                print(rows[-1]["traceback"], file=sys.stderr)
            else:
                doc = json.loads(proc.stdout)
                exact = sum(sorted(r["labels"]) == truth[r["client"]] for r in doc["clients"])
                rows.append({"engine": name, "clients": args.clients, "wall_s": round(wall, 1),
                             "s_per_client": round(wall / args.clients, 2), "labels_exact": exact,
                             "histogram": doc["histogram"]})
                print(rows[-1], file=sys.stderr, flush=True)
            table = write(rows, args)  # after every engine: a run stopped by a time limit keeps the rows so far
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
