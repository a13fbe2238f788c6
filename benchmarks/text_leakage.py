"""Text leakage: DAGER, TAG and LAMP on GPT-2-shaped decoders at random init, FedSGD, full updates and LoRA-only ones
(issue 68's benchmark).

    .venv/bin/python -m benchmarks.text_leakage                      # the grid below, rows appended
    .venv/bin/python -m benchmarks.text_leakage --width 768 --B 32 --T 32 --layers 12
    .venv/bin/python -m benchmarks.text_leakage --lora-grid          # LoRA-only updates (rank r on c_attn)
    .venv/bin/python -m benchmarks.text_leakage --width 256 --layers 4 --B 4 --T 16 --lora 64 [--fresh]
    .venv/bin/python -m benchmarks.text_leakage --matching-grid --attack tag [--steps 2500] [--seeds 0,1]
    .venv/bin/python -m benchmarks.text_leakage --fedavg-grid --seeds 0,1 [--double] [--steps-at global]
    .venv/bin/python -m benchmarks.text_leakage --encoder-grid --seeds 0,1 [--init-range 0.02]
    .venv/bin/python -m benchmarks.text_leakage --encoder-grid --attack tag --steps 1000 --seeds 0,1
    .venv/bin/python -m benchmarks.text_leakage --family llama --width 256 --layers 4 --B 16 --T 16 --seeds 0,1
    .venv/bin/python -m benchmarks.text_leakage --family llama --matching-grid --attack tag --seeds 0,1
    .venv/bin/python -m benchmarks.text_leakage --checkpoint FOLDER --B 4 --T 32 [--attack tag]  # e.g. a pretrained model
    .venv/bin/python -m benchmarks.text_leakage --table              # docs/results/text.md's table

Text: sentences of 4 to 20 words from the standard library's docstrings (fedaudit/models/text_tiny.py's corpus; the
length of the GLUE sentences DAGER's paper reads), drawn with a seeded generator, each cut to T - 1 tokens by the
capture (which ends every line with the end-of-sequence token). The
tokenizer is the byte-level BPE trained on that corpus (8,000 entries); the model's embedding has GPT-2's 50,257 rows
(entries past the tokenizer's are never used by the client, but every one is a candidate for the attack, as with a
real GPT-2). Per row: token accuracy, ROUGE-1/2/L, exact-sequence rate, DAGER's ranks and seconds, the load.
A LoRA row injects a rank-r adapter on every block's c_attn with ``peft`` (B ~ N(0, 0.02): a fine-tuned adapter; or
B = 0 with ``--fresh``) and uploads only its factors' gradients. TAG and LAMP (``--attack``) run their defaults but
``--steps``; MATCHING_GRID holds a batch DAGER cannot certify (B = 16 on width 64: saturated), where only they read
anything. FEDAVG_GRID: FedAvg deltas of K local SGD steps on K x B lines (``--double``: the client trains in float64;
``--steps-at global``: the reference code's reading); a row also says whether each recovered line's local step is the
one the client used it in. ENCODER_GRID: BERT-shaped sequence classifiers (3 or more layers), the WordPiece tokenizer
trained on the same corpus (8,000 entries) and BERT's 30,522 embedding rows, each line labelled 0/1 at random
(seeded), initializer_range ``--init-range`` (0.1 by default: fedaudit/models/text_tiny.py ``bert`` says why; BERT's
0.02 shows the random-init limit); with ``--attack tag|lamp`` ENCODER_MATCHING_GRID, the labels counted as
``fedaudit reconstruct`` counts them (fedaudit/labels/text_classes.py). ``--family llama``: the decoder rows on LLaMA
decoders (LLaMA-2's 32,000 embedding rows, rotary positions, the client's start token); TAG and LAMP are handed the
batch's padded length as ``--length`` (a reviewer gives it: rotary positions leave nothing to read it from). Rows go to
benchmarks/results/text_leakage.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, markdown
from benchmarks.records import append_row, jsonl_rows
from fedaudit.attacks.text import TEXT_ATTACKS
from fedaudit.client.text_capture import capture_text_update
from fedaudit.conversion import to_average_gradient
from fedaudit.io.text_checkpoint import TextCheckpoint, load_text_checkpoint
from fedaudit.labels.text_classes import classifier_classes
from fedaudit.metrics.text import text_scores
from fedaudit.models.text_tiny import add_lora, bert, corpus, gpt2, llama, train_tokenizer, train_wordpiece
from fedaudit.text_threat_model import LocalRound

OUT = RESULTS / "text_leakage.jsonl"
GPT2_VOCAB, BERT_VOCAB, LLAMA_VOCAB = 50_257, 30_522, 32_000
GRID = [  # (width, layers, heads, B, T)
    (64, 2, 2, 1, 16), (64, 2, 2, 4, 16), (256, 4, 4, 4, 32), (256, 4, 4, 16, 16),
    (768, 12, 12, 1, 32), (768, 12, 12, 4, 32), (768, 12, 12, 16, 32), (768, 12, 12, 32, 32),
]
MATCHING_GRID = [  # (width, layers, heads, B, T): TAG's and LAMP's rows (LAMP: B <= 4, its moves cost B x 200 lines)
    (64, 2, 2, 1, 16), (64, 2, 2, 4, 16), (64, 2, 2, 16, 16), (256, 4, 4, 1, 16), (256, 4, 4, 4, 16),
]
LORA_GRID = [  # (width, layers, heads, B, T, r, fresh): below and past the rank, as the paper's r = 256
    (256, 4, 4, 4, 16, 64, False), (256, 4, 4, 4, 16, 64, True), (256, 4, 4, 16, 16, 64, False),
    (768, 12, 12, 4, 32, 256, False), (768, 12, 12, 16, 32, 256, False),
]

FEDAVG_GRID = [  # (width, layers, heads, B, T, K, lr): DAGER on FedAvg deltas of K local SGD steps (K x B lines)
    (256, 4, 4, 4, 16, 2, 1e-4), (256, 4, 4, 4, 16, 2, 1e-3), (256, 4, 4, 4, 16, 2, 1e-2),
    (256, 4, 4, 4, 16, 3, 1e-3), (256, 4, 4, 4, 16, 4, 1e-3),
    (768, 12, 12, 4, 32, 2, 1e-3), (768, 12, 12, 4, 32, 4, 1e-3), (768, 12, 12, 4, 32, 4, 1e-4),
]
ENCODER_GRID = [  # (width, layers, heads, B, T): DAGER's encoder variant on BERT-shaped classifiers
    (128, 3, 2, 4, 16), (256, 4, 4, 4, 16), (256, 4, 4, 8, 16), (768, 12, 12, 4, 32), (768, 12, 12, 8, 32),
    (768, 12, 12, 16, 32),
]
ENCODER_MATCHING_GRID = [  # (width, layers, heads, B, T): TAG/LAMP on TinyBERT4's shape (312 wide, 4 layers, 12 heads)
    (312, 4, 12, 1, 16), (312, 4, 12, 4, 16),
]


def sentences() -> list[str]:
    """The corpus's sentences of 4 to 20 words (the length of the GLUE-style sentences DAGER's paper reads)."""
    out = set()
    for paragraph in corpus():
        for sentence in paragraph.split(". "):
            if 4 <= len(sentence.split()) <= 20:
                out.add(sentence.rstrip(".") + ".")
    return sorted(out)


def run(width: int, layers: int, heads: int, b: int, t: int, seed: int, tokenizer, lora: int = 0,
        fresh: bool = False, attack: str = "dager", steps: int | None = None, local_steps: int = 1,
        lr: float | None = None, double: bool = False, steps_at: str | None = None, init_range: float | None = None,
        shortlist: int | None = None, family: str = "gpt2", checkpoint: str | None = None, join: int = 1,
        device: str = "cpu") -> dict:
    """One row: B lines (K x B for a FedAvg delta of K local steps at ``lr``) sampled by ``seed``, captured on a
    model initialised by ``seed``, attacked, scored against every line of the round. ``init_range``: a BERT-shaped
    classifier at that initializer_range (the tokenizer a WordPiece one), its lines labelled at random. ``family``
    llama: a LLaMA decoder (32,000 rows, rotary positions, the start token the client prepends); TAG and LAMP are
    given the batch's padded length (``--length``: rotary positions leave nothing to read it from). ``checkpoint``: a
    Hugging Face folder (a pretrained model; its own tokenizer, width and layers; a classifier's lines labelled at
    random among its classes) instead of a random-init model. ``join``: each line ``join`` sentences joined (long
    lines, e.g. about 60 tokens at 4, cut by the capture to T - 1). ``device``: where the attack runs (the client's
    capture runs on the CPU), its model, gradient and a delta's change moved there as ``fedaudit reconstruct --device``
    moves them."""
    rng = random.Random(seed)
    drawn = rng.sample(sentences(), b * local_steps * join)
    lines = [" ".join(drawn[i:i + join]) for i in range(0, len(drawn), join)]
    if checkpoint:
        ckpt = load_text_checkpoint(checkpoint)
        tokenizer, width, layers = ckpt.tokenizer, ckpt.width, ckpt.layers
        if ckpt.kind == "encoder":
            lines = [f"{rng.randrange(int(ckpt.model.config.num_labels))}\t{line}" for line in lines]
    elif init_range is not None:
        net = bert(tokenizer, width, layers, heads, positions=512, seed=seed, init_range=init_range,
                   vocab_size=BERT_VOCAB)
        ckpt = TextCheckpoint(net, tokenizer, "bert", "encoder", "benchmark", "")
        lines = [f"{rng.randrange(2)}\t{line}" for line in lines]
    elif family == "llama":
        net = llama(tokenizer, width, layers, heads, positions=1024, seed=seed, vocab_size=LLAMA_VOCAB)
        ckpt = TextCheckpoint(net, tokenizer, "llama", "decoder", "benchmark", "")
    else:
        net = gpt2(tokenizer, width, layers, heads, positions=1024, seed=seed, vocab_size=GPT2_VOCAB)
        if double:  # the client trains in float64 (the reference code's FedAvg runs do): its round-off leaves the delta
            net = net.double()
        ckpt = TextCheckpoint(net, tokenizer, "gpt2", "decoder", "benchmark", "")
    if lora:
        add_lora(ckpt, r=lora, seed=seed, fresh=fresh)
    cap = capture_text_update(ckpt, lines, b, local_steps, lr, max_length=t)
    recorded, meta, batch = {ckpt.param_key(k): v for k, v in cap.tensors.items()}, cap.meta, cap.batch
    params = dict(ckpt.model.named_parameters())
    grads = to_average_gradient(meta, recorded, {k: params[k].detach() for k in recorded})
    local = LocalRound.of(meta, recorded) if local_steps > 1 else None
    if device != "cpu":
        ckpt.model.to(device)
        grads = {k: v.to(device) for k, v in grads.items()}
        local = local.on(device) if local else None
    options: dict = {"steps": steps} if steps and attack != "dager" else {}
    if steps_at and attack == "dager":
        options["steps-at"] = steps_at
    if shortlist is not None and attack == "dager":
        options["shortlist"] = shortlist
    encoder = ckpt.kind == "encoder"
    if ckpt.model_type == "llama" and attack != "dager":
        options["length"] = int(batch.ids.shape[1])  # the padded length, start token included (an oracle: module doc)
    classes = None
    if encoder and attack != "dager":  # the job's label count (fedaudit/jobs/text_reconstruct.py)
        classes, _ = classifier_classes(ckpt, grads, b)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    method = TEXT_ATTACKS.get(attack)(**options)
    result = method.run(ckpt, grads, meta.batch_size, local_steps, local, labels=classes)
    seconds = time.perf_counter() - t0
    lead = ckpt.lead  # an encoder's [CLS]
    true = [batch.ids[i, lead: n - 1].tolist() for i, n in enumerate(batch.lengths)]
    scores = text_scores(true, [tokenizer.decode(s) for s in true], result.sequences,
                         [tokenizer.decode(s) for s in result.sequences])
    update = "full" if not lora else f"lora r={lora}" + (" fresh" if fresh else "")
    if checkpoint:
        update += f" {ckpt.model_type} folder {Path(checkpoint).name}"
    elif family == "llama":
        update += " LLaMA"
    elif init_range is not None:
        update += f" BERT init {init_range:g}"
    if local_steps > 1:
        update += f" FedAvg K={local_steps} lr={lr:g}" + (" float64" if double else "")
    if join > 1:
        update += f", lines of {join} sentences"
    # a delta's lines: is each recovered line's local step (DAGER's replay) the step the client used it in?
    where = {tuple(s): int(k) for s, k in zip(true, cap.step.tolist())}
    steps_right = [where.get(tuple(s)) == k for s, k in zip(result.sequences, result.diagnostics.get("local_step") or [])]
    return {"attack": attack, **options, "update": update, "width": width, "layers": layers, "B": b, "T": t, "seed": seed,
            "visible_tokens": sum(n - 1 + lead for n in batch.lengths), "token_accuracy": scores.token_accuracy,
            "rouge1": scores.rouge1, "rouge2": scores.rouge2, "rougeL": scores.rougeL,
            "exact_rate": scores.exact_rate, "recovered": len(result.sequences), "certified": sum(result.exact),
            "seconds": round(seconds, 2),
            "threads": torch.get_num_threads(), "load": round(os.getloadavg()[0], 2), "device": device,
            "max_tokens_per_position": max(result.diagnostics.get("tokens_per_position") or [0]),
            "positions": len(result.diagnostics.get("tokens_per_position") or []),
            **{k: result.diagnostics.get(k) for k in ("ranks", "saturated", "rank_bound_reached", "span_source",
                                                      "objective", "length", "tau", "per_step", "replay_residual",
                                                      "round_off", "lengths_enumerated", "lengths_searched",
                                                      "lengths_revisited", "visible_limit", "unexplained_directions", "widened")},
            "search": f"shortlist {method.opts['shortlist']}, best first" if encoder and attack == "dager" else None,
            "true_steps": cap.step.tolist() if local_steps > 1 else None,
            "local_step": result.diagnostics.get("local_step"),
            "steps_right": sum(steps_right) if local_steps > 1 else None,
            "labels_right": None if classes is None or batch.labels is None
            else sorted(classes.tolist()) == sorted(batch.labels.tolist()),
            "training": trained_record(checkpoint)}


def trained_record(checkpoint: str | None) -> dict | None:
    """What benchmarks.text_pretrain wrote of a folder's training (its steps and next-token losses), if it made it."""
    path = Path(checkpoint) / "training.json" if checkpoint else None
    if path is None or not path.is_file():
        return None
    record = json.loads(path.read_text())
    return {k: record[k] for k in ("steps", "lr", "loss_before", "loss_after")}


def table(rows: list[dict]) -> str:
    return markdown(["attack", "update", "d", "layers", "B", "T", "seed", "visible tokens", "ranks", "token acc.",
                     "ROUGE-1", "ROUGE-2", "exact", "seconds", "load"],
                    [[r["attack"] + (f" {r['steps']}" if r.get("steps") else ""), r.get("update", "full"), r["width"],
                      r["layers"], r["B"], r["T"], r["seed"], r["visible_tokens"],
                      "/".join(map(str, r.get("ranks") or [])), f"{r['token_accuracy']:.3f}", f"{r['rouge1']:.3f}",
                      f"{r['rouge2']:.3f}", f"{r['exact_rate']:.2f}", f"{r['seconds']:.1f}", r["load"]]
                     for r in rows])


def encoder_table(rows: list[dict]) -> str:
    """The BERT rows: step 1's widest candidate list and the line ends searched beside the scores; DAGER's search
    (``search``: "shortlist N, best first" since 2026-11-30; earlier rows scored every token on whole lines, ends
    longest first)."""
    def ranks(r: dict) -> str:
        return ("/".join(map(str, r.get("ranks") or [])) or "-") + (" (saturated)" if r.get("saturated") else "")

    return markdown(["attack", "search", "d", "layers", "B", "T", "init", "seed", "visible tokens", "ranks",
                     "tokens per position (max)", "lengths searched", "token acc.", "ROUGE-1", "ROUGE-2", "exact",
                     "seconds"],
                    [[r["attack"], r.get("search") or ("whole lines" if r["attack"] == "dager" else "-"), r["width"],
                      r["layers"], r["B"], r["T"], r["update"].split("init ")[-1], r["seed"],
                      r["visible_tokens"], ranks(r), r.get("max_tokens_per_position") or "-",
                      "-" if r.get("lengths_searched") is None else r["lengths_searched"] + r["lengths_enumerated"],
                      f"{r['token_accuracy']:.3f}", f"{r['rouge1']:.3f}", f"{r['rouge2']:.3f}",
                      f"{r['exact_rate']:.2f}", f"{r['seconds']:.0f}"] for r in rows])


def fedavg_table(rows: list[dict]) -> str:
    """The FedAvg rows: lines per local step found, the replay's residual, the round-off, the steps assigned right."""
    return markdown(["update", "reading", "d", "B x K", "seed", "visible tokens", "ranks", "round-off", "per step",
                     "token acc.", "exact", "steps right", "replay residual", "seconds"],
                    [[r["update"], r.get("steps-at") or "replay", r["width"], f"{r['B']} x {len(set(r['true_steps']))}",
                      r["seed"], r["visible_tokens"], "/".join(map(str, r.get("ranks") or [])),
                      "/".join(f"{v:.0e}" for v in r.get("round_off") or []),
                      "/".join(map(str, r.get("per_step") or [])) or "-", f"{r['token_accuracy']:.3f}",
                      f"{r['exact_rate']:.2f}", f"{r['steps_right']}/{r['recovered']}" if r.get("per_step") else "-",
                      f"{r['replay_residual']:.0e}" if r.get("replay_residual") is not None else "-",
                      f"{r['seconds']:.1f}"] for r in rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for key in ("width", "layers", "heads", "B", "T"):
        ap.add_argument(f"--{key}", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lora", type=int, default=0, help="a LoRA-only update: the adapter's rank r")
    ap.add_argument("--fresh", action="store_true", help="with --lora: a new adapter (B = 0)")
    ap.add_argument("--lora-grid", action="store_true", help="run LORA_GRID")
    ap.add_argument("--matching-grid", action="store_true", help="run MATCHING_GRID")
    ap.add_argument("--attack", default="dager", choices=("dager", "tag", "lamp"))
    ap.add_argument("--steps", type=int, help="TAG's and LAMP's steps (their defaults otherwise)")
    ap.add_argument("--seeds", default=None, help="comma list (overrides --seed)")
    ap.add_argument("--local-steps", type=int, default=1, help="K: a FedAvg delta of K local SGD steps")
    ap.add_argument("--lr", type=float, help="with --local-steps: the local learning rate")
    ap.add_argument("--fedavg-grid", action="store_true", help="run FEDAVG_GRID")
    ap.add_argument("--double", action="store_true", help="the client trains in float64")
    ap.add_argument("--steps-at", choices=("replay", "global"), help="DAGER's reading of a delta (its default: replay)")
    ap.add_argument("--encoder-grid", action="store_true", help="run ENCODER_GRID (BERT-shaped classifiers)")
    ap.add_argument("--init-range", type=float, default=0.1, help="the encoder rows' initializer_range")
    ap.add_argument("--shortlist", type=int, help="DAGER's encoder search: its --shortlist (its default otherwise)")
    ap.add_argument("--family", choices=("gpt2", "llama"), default="gpt2", help="the decoder rows' family")
    ap.add_argument("--checkpoint", help="a Hugging Face folder (e.g. a pretrained model) for the rows: its tokenizer, "
                    "width and layers; --B, --T, --lora, --attack, --seeds apply")
    ap.add_argument("--out", type=Path, default=OUT, help="the rows' file")
    ap.add_argument("--join", type=int, default=1, help="sentences per line (long lines for T = 64)")
    ap.add_argument("--device", default="cpu", help="where the attack runs (cpu, cuda)")
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args(argv)
    if args.table:
        rows = jsonl_rows(args.out)
        encoder = [r for r in rows if "BERT" in r.get("update", "")]
        print(table([r for r in rows if not r.get("true_steps") and r not in encoder]))
        print(encoder_table(encoder))
        print(fedavg_table([r for r in rows if r.get("true_steps")]))
        return 0
    torch.set_num_threads(args.threads)
    rounds = [(1, None)]
    if args.fedavg_grid:
        grid = [(*g, 0, False) for g in {r[:5]: None for r in FEDAVG_GRID}]
    elif args.encoder_grid:
        grid = [(*g, 0, False) for g in (ENCODER_GRID if args.attack == "dager" else ENCODER_MATCHING_GRID)]
    else:
        grid = LORA_GRID if args.lora_grid else [(*g, 0, False) for g in (MATCHING_GRID if args.matching_grid else GRID)]
    if args.width:
        grid = [(args.width, args.layers or 2, args.heads or max(1, args.width // 64), args.B or 4, args.T or 32,
                 args.lora, args.fresh)]
    if args.local_steps > 1:
        rounds = [(args.local_steps, args.lr)]
    if args.checkpoint:  # the folder's own width, layers and tokenizer
        grid = [(0, 0, 0, args.B or 4, args.T or 32, args.lora, args.fresh)]
    tokenizer = None if args.checkpoint else train_wordpiece(8000) if args.encoder_grid else train_tokenizer(8000)
    init_range = args.init_range if args.encoder_grid else None
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    for width, layers, heads, b, t, lora, fresh in grid:
        if args.attack == "lamp" and b > 4:
            continue
        for k, lr in ([r[5:] for r in FEDAVG_GRID if r[:5] == (width, layers, heads, b, t)] if args.fedavg_grid
                      else rounds):
            for seed in seeds:
                row = run(width, layers, heads, b, t, seed, tokenizer, lora, fresh, args.attack, args.steps, k, lr,
                          args.double, args.steps_at, init_range, args.shortlist, args.family, args.checkpoint,
                          args.join, args.device)
                print(json.dumps(row), file=sys.stderr, flush=True)
                append_row(args.out, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
