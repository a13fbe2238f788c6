"""A trained language model made offline, for the text benchmarks' trained-weights rows: a GPT-2 decoder trained
with the next-token loss on the docstrings of standard-library modules *other* than the ones the attacked sentences
come from (fedaudit/models/text_tiny.py's CORPUS_MODULES), so that it knows the language of the attacked lines
without having seen them. No pretrained language model ships offline; this is the nearest stand-in (a small model
that has learnt English from API documentation), not GPT-2's weights. Its training text is the running Python's
docstrings (``docstrings``; the attacked sentences and the tokenizer come from the frozen corpus, the same on every
Python), so the rows' models were trained on Python 3.11.7's.

    PYTHONPATH=. .venv/bin/python -m benchmarks.text_pretrain OUT --width 256 --layers 4 --steps 1500
    PYTHONPATH=. .venv/bin/python -m benchmarks.text_pretrain OUT --steps 0      # the same model at random init
    PYTHONPATH=. .venv/bin/python -m benchmarks.text_leakage --checkpoint OUT --B 4 --T 16 --seeds 0,1

The folder (config.json, model.safetensors, tokenizer.json) is what ``fedaudit`` reads as a checkpoint; the
tokenizer is the text benchmarks' byte-level BPE (8,000 entries, trained on the attacked corpus's text as a deployed
tokenizer would be on its domain) and the embedding has its 8,000 rows (``--vocab-size`` for more: rows past the
tokenizer's are never trained). Any paragraph holding a sentence the benchmarks attack is dropped from the training
text. Prints, and writes to OUT/training.json, the next-token loss on the training text and on the attacked
sentences (held out) before and after: a drop on the held-out sentences is the prior the attacks can use.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

from benchmarks.text_leakage import sentences
from fedaudit.client.text_capture import TextBatch, ended_batch, next_token_loss
from fedaudit.io.text_checkpoint import save_text_checkpoint
from fedaudit.models.text_tiny import CORPUS_MODULES, EOS, docstrings, gpt2, llama, train_tokenizer

TRAIN_MODULES = (  # standard-library modules outside CORPUS_MODULES (those missing on a Python are skipped)
    "abc", "ast", "asyncio", "base64", "bisect", "bz2", "calendar", "cmd", "code", "codecs", "concurrent.futures",
    "configparser", "contextlib", "copy", "cProfile", "csv", "datetime", "decimal", "difflib", "doctest", "email",
    "enum", "filecmp", "fnmatch", "fractions", "ftplib", "getopt", "glob", "graphlib", "gzip", "hashlib", "heapq",
    "hmac", "html.parser", "http.client", "http.cookies", "http.server", "imaplib", "importlib", "io", "ipaddress",
    "locale", "lzma", "mimetypes", "multiprocessing", "netrc", "numbers", "operator", "optparse", "pdb", "platform",
    "plistlib", "poplib", "pprint", "profile", "pstats", "pydoc", "queue", "random", "reprlib", "runpy", "sched",
    "secrets", "selectors", "shelve", "shlex", "signal", "site", "smtplib", "socket", "socketserver", "sqlite3",
    "stat", "statistics", "struct", "sysconfig", "tarfile", "tempfile", "threading", "timeit", "tokenize", "trace",
    "traceback", "types", "urllib.request", "uuid", "warnings", "weakref", "wsgiref", "xml.dom.minidom",
    "xml.etree.ElementTree", "zipimport", "zoneinfo",
)


def training_text() -> tuple[list[str], list[str]]:
    """The training paragraphs (none holding an attacked sentence) and the modules they came from."""
    import importlib

    modules = []
    for name in TRAIN_MODULES:
        if name in CORPUS_MODULES:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        modules.append(name)
    attacked = set(sentences())
    paragraphs = sorted({p for p in docstrings(tuple(modules))
                         if not any(s.rstrip(".") + "." in attacked for s in p.split(". "))})
    return paragraphs, modules


def encode(tokenizer, lines: list[str], t: int, start_token: bool = False) -> TextBatch:
    """The attacked lines as the client's capture frames them: each cut to t - 1 tokens and ended with EOS (LLaMA:
    begun with the start token, EOS's id, fedaudit.models.text_tiny.llama)."""
    eos = tokenizer.token_to_id(EOS)
    return ended_batch([tokenizer.encode(line, add_special_tokens=False).ids[:t - 1 - start_token] for line in lines],
                       eos, start=eos if start_token else None)


def packed(tokenizer, paragraphs: list[str], t: int, start_token: bool = False) -> TextBatch:
    """The paragraphs' tokens, each ended with EOS, run together and cut into windows of t (every token trained on,
    not only each paragraph's first t); ``start_token``: every window begins with the start token (LLaMA's lines
    do)."""
    eos = tokenizer.token_to_id(EOS)
    stream = [i for p in paragraphs for i in tokenizer.encode(p, add_special_tokens=False).ids + [eos]]
    width = t - 1 if start_token else t
    n = len(stream) // width
    ids = torch.tensor(stream[:n * width], dtype=torch.long).view(n, width)
    if start_token:
        ids = torch.cat([torch.full((n, 1), eos, dtype=torch.long), ids], 1)
    return TextBatch(ids, torch.ones_like(ids), [t] * n)


def windows(batch: TextBatch, rows: list[int] | slice) -> TextBatch:
    """Some rows of ``batch``."""
    lengths = [batch.lengths[i] for i in rows] if isinstance(rows, list) else batch.lengths[rows]
    return TextBatch(batch.ids[rows], batch.mask[rows], lengths)


@torch.no_grad()
def mean_loss(model, batch: TextBatch, chunk: int = 64) -> float:
    """The next-token loss per predicted token over all lines (nats)."""
    total = count = 0.0
    for i in range(0, len(batch.ids), chunk):
        part = windows(batch, slice(i, i + chunk))
        n = float(part.mask[:, 1:].sum())
        total += float(next_token_loss(model, part)) * n
        count += n
    return total / max(count, 1.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--family", choices=("gpt2", "llama"), default="gpt2",
                    help="llama: rotary positions, RMSNorm, SwiGLU (fedaudit.models.text_tiny.llama); its lines start "
                         "with the start token, as its capture frames them")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--steps", type=int, default=1500, help="AdamW steps (0: the model at random init)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--T", type=int, default=32, help="training lines' length in tokens")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--vocab-size", type=int, default=8000, help="embedding rows (the tokenizer has 8,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=100, help="steps between validation readings")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer = train_tokenizer(8000)
    build = llama if args.family == "llama" else gpt2
    model = build(tokenizer, args.width, args.layers, args.heads or max(1, args.width // 64), seed=args.seed,
                  vocab_size=args.vocab_size)
    paragraphs, modules = training_text()
    random.Random(args.seed).shuffle(paragraphs)
    cut = len(paragraphs) // 20  # 5% of the paragraphs validate (the steps kept); the attacked sentences are not used
    start_token = args.family == "llama"
    train, val = packed(tokenizer, paragraphs[cut:], args.T, start_token), packed(tokenizer, paragraphs[:cut], args.T,
                                                                                  start_token)
    held = encode(tokenizer, sentences(), args.T, start_token)

    def losses() -> dict:
        return {"train": mean_loss(model.eval(), train), "validation": mean_loss(model, val),
                "held_out": mean_loss(model, held)}

    before = losses()
    print(f"{len(paragraphs)} paragraphs from {len(modules)} modules, {len(train.ids)} windows of {args.T}; loss "
          f"before: {before}", file=sys.stderr)
    best = (before["validation"], 0, {k: v.clone() for k, v in model.state_dict().items()})
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    gen = random.Random(args.seed)
    start = time.perf_counter()
    model.train()
    for step in range(args.steps):
        for group in opt.param_groups:  # linear warm-up over 5% of the steps, then cosine decay
            warm = max(1, args.steps // 20)
            group["lr"] = args.lr * min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        loss = next_token_loss(model, windows(train, gen.sample(range(len(train.ids)), args.batch)))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % args.every == 0 or step + 1 == args.steps:
            val_loss = mean_loss(model.eval(), val)
            model.train()
            if val_loss < best[0]:
                best = (val_loss, step + 1, {k: v.clone() for k, v in model.state_dict().items()})
            print(f"step {step + 1}: loss {loss.item():.3f}, validation {val_loss:.3f} ({time.perf_counter() - start:.0f} s)",
                  file=sys.stderr, flush=True)
    model.load_state_dict(best[2])  # the steps with the lowest validation loss
    after = losses()
    record = {"family": args.family, "width": args.width, "layers": args.layers, "steps": args.steps, "kept_step": best[1], "batch": args.batch, "T": args.T,
              "lr": args.lr, "vocab_size": args.vocab_size, "seed": args.seed, "paragraphs": len(paragraphs), "windows": len(train.ids),
              "modules": modules, "loss_before": before, "loss_after": after,
              "seconds": round(time.perf_counter() - start, 1)}
    save_text_checkpoint(args.out, model, tokenizer)
    (args.out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
