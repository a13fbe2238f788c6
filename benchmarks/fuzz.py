"""Fuzzing the file readers and commands: mutated sample updates and checkpoints through the CLI, in process.

    .venv/bin/python -m benchmarks.fuzz --cases 10000          # the benchmark (prints counts by exit code)
    .venv/bin/python -m benchmarks.fuzz --cases 5000 --start 5000 --out B &   # or split over two cores, then
    .venv/bin/python -m benchmarks.fuzz --report A/fuzz_rows.jsonl B/fuzz_rows.jsonl
    (tests/fuzz/test_fuzz.py runs a fixed-seed sample of 500 in CI)

Mutations of a real safetensors file (``sample_updates/``: an update, a checkpoint or a truth file): truncation at
every structural boundary (inside the 8-byte length, inside and at the end of the JSON header, inside the data, one
byte short) and at random points; bit flips in the header and in the data; header rewrites (a tensor's dtype, shape
or data offsets changed, huge sizes, a tensor renamed or removed, an unknown tensor added, metadata values of the
wrong type or out of range); tensor values replaced by NaN, Inf, denormals or huge numbers; zero-size tensors.
Mutations of the other inputs (benchmarks/fuzz_inputs.py): label files (wrong JSON types and values, truncation,
safetensors labels of the wrong dtype or shape), Flower .npz arrays (truncation, bit flips, arrays dropped, added,
swapped, retyped, reshaped, pickled, NaN, a header claiming 10^12 elements) and image folders (truncated or
bit-flipped PNGs, empty and text files, other modes, large images, a decompression-bomb header, stray files, names
without a class number, an empty folder). Each case runs one command on the mutated input: ``inspect``,
``labels auto``/``llg`` (also with ``--truth``), ``reconstruct ig -n 2`` (also with ``--labels-file``),
``defend prune``, ``score``, ``import flower-npz`` or ``capture``. The contract: exit 0, 1 or 2 (never 3 for bad
input, never a traceback), at most one line on stderr for exit 2, no temporary or partial file left, within the
time limit.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import struct
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import save as st_save
from typer.testing import CliRunner

from benchmarks.fuzz_inputs import mutate_image_folder, mutate_labels_file, mutate_npz
from benchmarks.records import append_row, jsonl_rows
from fedaudit.cli.app import app
from fedaudit.io.checkpoint import load_checkpoint
from fedaudit.io.files import read_safetensors

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_updates"
TIME_LIMIT = 30.0
COMMANDS = (
    ("inspect",),
    ("labels", "llg"),
    ("labels", "auto", "--dummy", "--num-dummy", "50"),
    ("reconstruct", "ig", "-n", "2", "-o", "{out}"),
    ("defend", "prune", "-o", "{out}.safetensors"),
)
FAST = COMMANDS[:2]  # the CI sample: the readers and the cheapest commands


def _split(data: bytes) -> tuple[dict, int]:
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), 8 + n


def _join(header: dict, body: bytes) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One mutation of a safetensors file: (what was done, the new bytes)."""
    header, start = _split(data)
    body = data[start:]
    names = [k for k in header if k != "__metadata__"]
    kind = rng.choice(["truncate", "truncate", "flip", "flip", "dtype", "shape", "offsets", "rename", "remove",
                       "extra", "metadata", "values", "zero"])
    if kind == "truncate":
        cut = rng.choice([0, 1, 7, 8, 9, start // 2, start - 1, start, start + 1, start + len(body) // 2,
                          len(data) - 1, rng.randrange(len(data))])
        return f"truncate@{cut}", data[:cut]
    if kind == "flip":
        where = rng.choice([rng.randrange(8, start), rng.randrange(len(data))])
        out = bytearray(data)
        out[where] ^= 1 << rng.randrange(8)
        return f"flip@{where}", bytes(out)
    name = rng.choice(names)
    if kind == "dtype":
        header[name]["dtype"] = rng.choice(["I32", "I64", "F16", "BF16", "F64", "BOOL", "U8", "XX", 7])
        return f"dtype {name}={header[name]['dtype']}", _join(header, body)
    if kind == "shape":
        header[name]["shape"] = rng.choice([[], [0], [10 ** 12], [-1], [2 ** 31, 2 ** 31], ["a"], [1] * 9,
                                            list(reversed(header[name]["shape"]))])
        return f"shape {name}={header[name]['shape']}", _join(header, body)
    if kind == "offsets":
        a, b = header[name]["data_offsets"]
        header[name]["data_offsets"] = rng.choice([[b, a], [a, b + 4], [0, len(body) + 8], [a, a], [-4, b], [a, 2 ** 62]])
        return f"offsets {name}={header[name]['data_offsets']}", _join(header, body)
    if kind == "rename":
        other = rng.choice(names + ["conv.weight", ""])
        header[other] = header.pop(name)
        return f"rename {name}->{other}", _join(header, body)
    if kind == "remove":
        header.pop(name)
        return f"remove {name}", _join(header, body)
    if kind == "extra":
        header["not.a.parameter"] = dict(header[name])
        return "extra tensor", _join(header, body)
    tensors, meta = _tensors(data)
    if kind == "metadata":
        key = rng.choice(sorted(meta) + ["fedaudit.batch_size", "fedaudit.kind", "fedaudit.local_steps", "fedaudit.local_lr",
                                         "fedaudit.num_classes", "fedaudit.input_shape", "fedaudit.arch", "fedaudit.mean"])
        meta[key] = rng.choice(["", "abc", "-3", "0", "1e9", "nan", "inf", "[1,2]", "{}", "null", "\u0000", "9" * 400,
                                "[3,100000,100000]", "1000000000", "gradient", "weights", "delta"])
        return f"metadata {key}={meta[key][:20]!r}", st_save(tensors, meta)
    if kind == "values":
        name = rng.choice(sorted(tensors))
        t = tensors[name]
        if t.is_floating_point() and t.numel():
            t = t.clone()
            t.view(-1)[rng.randrange(t.numel())] = rng.choice([float("nan"), float("inf"), -float("inf"), 1e-45, 3e38])
            tensors[name] = t
        return f"values {name}", st_save(tensors, meta)
    name = rng.choice(sorted(tensors))
    tensors[name] = torch.zeros(0, dtype=tensors[name].dtype)
    return f"zero-size {name}", st_save(tensors, meta)


def _tensors(data: bytes):
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as fh:
        fh.write(data)
        fh.flush()
        return read_safetensors(fh.name, "seed")


class Hang(BaseException):
    """Raised by SIGALRM in a case that runs past TIME_LIMIT (a BaseException: no handler may swallow it)."""


def _hang(signum, frame):  # noqa: ARG001 - the signal handler's signature
    raise Hang("no exit within the case's time limit")


LOAD_FACTOR = 20  # a case's limit: at least TIME_LIMIT, else this many times the baseline command's time


def measured_limit(runner: CliRunner) -> tuple[float, float]:
    """(the per-case time limit, the baseline it was scaled from): the baseline is one ``inspect`` of a sample
    timed on this machine now, so a loaded machine (where start-up alone once passed 30 s) gets a longer limit."""
    ckpt = SAMPLES / "lenet_b1" / "checkpoint.safetensors"
    t0 = time.perf_counter()
    runner.invoke(app, ["inspect", str(ckpt), str(SAMPLES / "lenet_b1" / "update.safetensors"), "-q"],
                  env={"NO_COLOR": "1"})
    baseline = time.perf_counter() - t0
    return max(TIME_LIMIT, LOAD_FACTOR * baseline), baseline


# What each case mutates: (target, weight in the full run, in the fast CI sample).
TARGETS = (("update", 6, 6), ("checkpoint", 2, 2), ("truth", 1, 1), ("recon", 1, 0), ("labels-file", 1, 1),
           ("npz", 1, 1), ("images", 1, 1))


def _truth(sample: str) -> tuple[torch.Tensor, list[int]]:
    tensors, _ = read_safetensors(SAMPLES / sample / "truth.safetensors", "truth")
    return tensors["images"], [int(v) for v in tensors["labels"]]


def _arguments(target: str, sample: str, case: Path, rng: random.Random, fast: bool) -> tuple[str, list[str]]:
    """Mutate the target input of one case; return what was done and the command line."""
    ckpt, upd = SAMPLES / sample / "checkpoint.safetensors", SAMPLES / sample / "update.safetensors"
    truth = SAMPLES / sample / "truth.safetensors"
    out = str(case / "out")
    if target in ("update", "checkpoint"):
        what, data = mutate((upd if target == "update" else ckpt).read_bytes(), rng)
        bad = case / f"{target}.safetensors"
        bad.write_bytes(data)
        command = [a.replace("{out}", out) for a in rng.choice(FAST if fast else COMMANDS)]
        c, u = str(bad if target == "checkpoint" else ckpt), str(bad if target == "update" else upd)
        if command[0] == "inspect":
            return what, ["inspect", c, u]
        return what, [*command[:2], c, u, *command[2:]]
    if target in ("truth", "recon"):
        what, data = mutate(truth.read_bytes(), rng)
        bad = case / f"{target}.safetensors"
        bad.write_bytes(data)
        if target == "recon":  # the reconstructions scored against the real truth
            return what, ["score", str(bad), "--truth", str(truth), "-o", out, "--lpips-net", "alex"]
        if fast or rng.random() < 0.5:
            return what, ["labels", "llg", str(ckpt), str(upd), "--truth", str(bad)]
        return what, ["score", str(truth), "--truth", str(bad), "-o", out, "--lpips-net", "alex"]
    images, labels = _truth(sample)
    if target == "labels-file":
        what, path = mutate_labels_file(labels, case, rng)
        return what, ["reconstruct", "ig", str(ckpt), str(upd), "--labels-file", str(path), "-n", "2", "-o", out]
    if target == "npz":
        tensors, _ = read_safetensors(upd, "update")
        order = [n for n, _ in load_checkpoint(ckpt).model.named_parameters()]  # Flower's positional order
        what, path = mutate_npz([tensors[n] for n in order], case, rng)
        return what, ["import", "flower-npz", str(path), "-c", str(ckpt), "-o", out + ".safetensors", "--kind", "gradient",
                      "--order", "parameters", "-b", str(len(labels))]
    what, folder = mutate_image_folder(images, labels, case, rng)
    return what, ["capture", str(ckpt), str(folder), "-b", str(len(labels)), "--image-labels", "names",
                  "-o", out + ".safetensors", "--truth-out", out + ".truth.safetensors"]


def run_case(runner: CliRunner, seed: int, workdir: Path, fast: bool = False, limit: float = TIME_LIMIT) -> dict:
    """One fuzz case; the result says whether it kept the contract. ``fast``: the cheap commands on LeNet only. A
    case still running after ``limit`` seconds is stopped and recorded as a failure row; the run goes on."""
    rng = random.Random(seed)
    sample = rng.choice(["lenet_b1", "lenet_b4", "lenet_fedavg_k3"] + ([] if fast else ["convnet_b8_repeated"]))
    names = [t[0] for t in TARGETS]
    target = rng.choices(names, weights=[t[2 if fast else 1] for t in TARGETS])[0]
    case = workdir / f"case{seed}"
    case.mkdir()
    what, args = _arguments(target, sample, case, rng, fast)
    command = args[:2] if args[0] in ("labels", "reconstruct", "defend", "import") else args[:1]
    t0 = time.perf_counter()
    signal.signal(signal.SIGALRM, _hang)
    signal.setitimer(signal.ITIMER_REAL, limit)  # a hang becomes a recorded failure instead of stopping the run
    try:
        result = runner.invoke(app, [*args, "-q"], env={"NO_COLOR": "1", "COLUMNS": "120", "FEDAUDIT_PROXIES": "0"})
    except Hang as exc:  # CliRunner catches Exception only: the alarm's BaseException reaches here
        result = SimpleNamespace(exit_code=None, exception=exc, stderr="")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    seconds = time.perf_counter() - t0
    stderr = result.stderr if hasattr(result, "stderr") else ""
    leftovers = [p.name for p in case.rglob("*") if p.name.endswith((".tmp", ".partial")) or ".partial" in p.name]
    problems = []
    code = result.exit_code
    if code not in (0, 1, 2) and code is not None:
        problems.append(f"exit {code}")
    if isinstance(result.exception, Hang):
        problems.append(f"hang: no exit within {limit:.3g} s")
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        problems.append(f"exception {type(result.exception).__name__}: {result.exception}")
    if "Traceback" in stderr:
        problems.append("traceback")
    if code == 2 and len([ln for ln in stderr.splitlines() if ln.strip()]) != 1:
        problems.append("not one line on stderr")
    if leftovers:
        problems.append(f"partial files {leftovers}")
    if seconds > limit and not isinstance(result.exception, Hang):
        problems.append(f"took {seconds:.0f} s")
    return {"seed": seed, "sample": sample, "target": target, "mutation": what, "command": " ".join(command[:2]),
            "exit": code, "seconds": round(seconds, 3), "problems": problems,
            "stderr": stderr.strip().splitlines()[-1:] if stderr.strip() else []}


def fuzz(cases: int, seed: int = 0, fast: bool = False, start: int = 0, log: Path | None = None) -> list[dict]:
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    torch.set_num_threads(1)
    rows = []
    limit, baseline = measured_limit(runner)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(start, start + cases):
            rows.append({**run_case(runner, seed * 1_000_003 + i, Path(tmp), fast, limit), "limit_s": round(limit, 1),
                         "baseline_s": round(baseline, 3)})
            if log is not None:  # one row per line as it finishes: a killed run keeps what it found
                append_row(log, rows[-1])
    return rows


def summary(rows: list[dict], seconds: float, seed: int) -> str:
    """Counts by exit code, input and command, and the first failing case of each kind."""
    by_exit = Counter(r["exit"] for r in rows)
    failing = [r for r in rows if r["problems"]]
    first: dict[str, dict] = {}
    for r in failing:
        first.setdefault(r["problems"][0].split(":")[0], r)
    seeds = sorted(r["seed"] - seed * 1_000_003 for r in rows)
    lines = [f"# Fuzz run: {len(rows)} cases ({seeds[0]}-{seeds[-1]}), seed {seed}, {seconds:.0f} s", "",
             "Exit codes: " + ", ".join(f"{k}: {v}" for k, v in sorted(by_exit.items())),
             "By input: " + ", ".join(f"{t} {sum(r['target'] == t for r in rows)} "
                                      f"({', '.join(f'exit {k}: {v}' for k, v in sorted(Counter(r['exit'] for r in rows if r['target'] == t).items()))})"
                                      for t, _, _ in TARGETS),
             "By command: " + ", ".join(f"{c} {n}" for c, n in Counter(r["command"] for r in rows).most_common()),
             f"Per-case limit: {rows[0].get('limit_s', TIME_LIMIT)} s (at least {TIME_LIMIT:.0f} s, else {LOAD_FACTOR} x "
             f"a baseline `inspect` timed at the start: {rows[0].get('baseline_s', 'n/a')} s)",
             f"Cases breaking the contract: {len(failing)}", ""]
    for kind, r in first.items():
        lines.append(f"- first '{kind}': seed {r['seed']}, {r['sample']} {r['target']}, {r['mutation']}, "
                     f"`{r['command']}`: {r['problems']} {r['stderr']}")
    lines.append(f"\nSlowest case: {max(r['seconds'] for r in rows):.2f} s; time in commands: "
                 f"{sum(r['seconds'] for r in rows):.0f} s")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first case index (to continue a run, or split one over cores)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--report", type=Path, nargs="+", metavar="ROWS",
                    help="summarise these fuzz_rows.jsonl files (the parts of a split or stopped run) and exit")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.report:
        rows = jsonl_rows(*args.report)
        seconds = sum(r["seconds"] for r in rows)
    else:
        rows = fuzz(args.cases, args.seed, start=args.start, log=args.out / "fuzz_rows.jsonl")
        seconds = time.perf_counter() - t0
    text = summary(rows, seconds, args.seed)
    (args.out / "fuzz.md").write_text(text)
    print(text)
    return 1 if any(r["problems"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
