"""Text leakage: DAGER on GPT-2-shaped decoders at random init, FedSGD (issue 68's benchmark; more attacks to come).

    .venv/bin/python -m benchmarks.text_leakage                      # the grid below, rows appended
    .venv/bin/python -m benchmarks.text_leakage --width 768 --B 32 --T 32 --layers 12
    .venv/bin/python -m benchmarks.text_leakage --table              # docs/results/text.md's table

Text: sentences of 4 to 20 words from the standard library's docstrings (fedaudit/models/text_tiny.py's corpus; the
length of the GLUE sentences DAGER's paper reads), drawn with a seeded generator, each cut to T - 1 tokens by the
capture (which ends every line with the end-of-sequence token). The
tokenizer is the byte-level BPE trained on that corpus (8,000 entries); the model's embedding has GPT-2's 50,257 rows
(entries past the tokenizer's are never used by the client, but every one is a candidate for the attack, as with a
real GPT-2). Per row: token accuracy, ROUGE-1/2/L, exact-sequence rate, DAGER's ranks and seconds, the load.
Rows go to benchmarks/results/text_leakage.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import torch

from benchmarks.common import RESULTS
from fedaudit.attacks.text import TEXT_ATTACKS
from fedaudit.client.text_capture import capture_text_gradient
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.metrics.text import text_scores
from fedaudit.models.text_tiny import corpus, gpt2, train_tokenizer

OUT = RESULTS / "text_leakage.jsonl"
GPT2_VOCAB = 50_257
GRID = [  # (width, layers, heads, B, T)
    (64, 2, 2, 1, 16), (64, 2, 2, 4, 16), (256, 4, 4, 4, 32), (256, 4, 4, 16, 16),
    (768, 12, 12, 1, 32), (768, 12, 12, 4, 32), (768, 12, 12, 16, 32), (768, 12, 12, 32, 32),
]


def sentences() -> list[str]:
    """The corpus's sentences of 4 to 20 words (the length of the GLUE-style sentences DAGER's paper reads)."""
    out = set()
    for paragraph in corpus():
        for sentence in paragraph.split(". "):
            if 4 <= len(sentence.split()) <= 20:
                out.add(sentence.rstrip(".") + ".")
    return sorted(out)


def run(width: int, layers: int, heads: int, b: int, t: int, seed: int, tokenizer) -> dict:
    lines = random.Random(seed).sample(sentences(), b)
    net = gpt2(tokenizer, width, layers, heads, positions=1024, seed=seed, vocab_size=GPT2_VOCAB)
    ckpt = TextCheckpoint(net, tokenizer, "gpt2", "decoder", "benchmark", "")
    grads, meta, batch = capture_text_gradient(ckpt, lines, max_length=t)
    t0 = time.perf_counter()
    result = TEXT_ATTACKS.get("dager")().run(ckpt, grads, meta.batch_size)
    seconds = time.perf_counter() - t0
    true = [batch.ids[i, : n - 1].tolist() for i, n in enumerate(batch.lengths)]
    scores = text_scores(true, [tokenizer.decode(s) for s in true], result.sequences,
                         [tokenizer.decode(s) for s in result.sequences])
    return {"attack": "dager", "width": width, "layers": layers, "B": b, "T": t, "seed": seed,
            "visible_tokens": sum(n - 1 for n in batch.lengths), "token_accuracy": scores.token_accuracy,
            "rouge1": scores.rouge1, "rouge2": scores.rouge2, "rougeL": scores.rougeL,
            "exact_rate": scores.exact_rate, "recovered": len(result.sequences), "seconds": round(seconds, 2),
            "threads": torch.get_num_threads(), "load": round(os.getloadavg()[0], 2),
            "max_tokens_per_position": max(result.diagnostics.get("tokens_per_position") or [0]),
            "positions": len(result.diagnostics.get("tokens_per_position") or []),
            **{k: result.diagnostics[k] for k in ("ranks", "saturated")}}


def table(rows: list[dict]) -> str:
    lines = ["| d | layers | B | T | visible tokens | token acc. | ROUGE-1 | ROUGE-2 | exact | seconds | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['width']} | {r['layers']} | {r['B']} | {r['T']} | {r['visible_tokens']} | "
                     f"{r['token_accuracy']:.3f} | {r['rouge1']:.3f} | {r['rouge2']:.3f} | {r['exact_rate']:.2f} | "
                     f"{r['seconds']:.1f} | {r['load']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for key in ("width", "layers", "heads", "B", "T"):
        ap.add_argument(f"--{key}", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args(argv)
    if args.table:
        print(table([json.loads(line) for line in OUT.read_text().splitlines() if line.strip()]))
        return 0
    torch.set_num_threads(args.threads)
    grid = GRID
    if args.width:
        grid = [(args.width, args.layers or 2, args.heads or max(1, args.width // 64), args.B or 4, args.T or 32)]
    tokenizer = train_tokenizer(8000)
    for width, layers, heads, b, t in grid:
        row = run(width, layers, heads, b, t, args.seed, tokenizer)
        print(json.dumps(row), file=sys.stderr, flush=True)
        with OUT.open("a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
