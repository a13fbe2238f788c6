"""Text metrics of a reconstruction against the client's batch (metrics only: attacks never see the truth).

Each recovered sequence is matched to a true one (scipy's assignment on ROUGE-L F, the pairing that maximises the
batch's total), as images are matched; unmatched true sequences score 0. Per pair: token accuracy (the share of the
true sequence's positions holding the same token), ROUGE-1/2/L F-measures (``rouge-score``, on the decoded text) and
exact equality; the batch's figures are means over the true sequences.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from fedaudit.errors import InputError


@dataclass(frozen=True)
class TextScores:
    token_accuracy: float
    rouge1: float
    rouge2: float
    rougeL: float
    exact_rate: float
    pairs: list[tuple[int, int | None]]  # (true index, matched recovered index or None)
    per_sequence: list[dict[str, float]]  # per true sequence: token_accuracy, rouge1, rouge2, rougeL, exact


def _scorer():
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise InputError("text metrics need the text extra: pip install 'fedaudit[text]'") from None
    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)


def token_accuracy(true: list[int], recovered: list[int]) -> float:
    """The share of the true sequence's positions where the recovered one holds the same token."""
    if not true:
        return 1.0 if not recovered else 0.0
    return sum(a == b for a, b in zip(true, recovered)) / len(true)


def text_scores(true_ids: list[list[int]], true_text: list[str], rec_ids: list[list[int]], rec_text: list[str]) -> TextScores:
    """Match the recovered sequences to the true ones and score the batch."""
    scorer = _scorer()
    n, m = len(true_ids), len(rec_ids)
    table = [[scorer.score(t, r) for r in rec_text] for t in true_text]
    pairs: list[tuple[int, int | None]] = [(i, None) for i in range(n)]
    if n and m:
        gain = np.array([[s["rougeL"].fmeasure for s in row] for row in table])
        rows, cols = linear_sum_assignment(-gain)
        match = dict(zip(rows.tolist(), cols.tolist()))
        pairs = [(i, match.get(i)) for i in range(n)]
    per = []
    for i, j in pairs:
        if j is None:
            per.append((0.0, 0.0, 0.0, 0.0, 0.0))
            continue
        s = table[i][j]
        per.append((token_accuracy(true_ids[i], rec_ids[j]), s["rouge1"].fmeasure, s["rouge2"].fmeasure,
                    s["rougeL"].fmeasure, float(true_ids[i] == rec_ids[j])))
    rows = [dict(zip(("token_accuracy", "rouge1", "rouge2", "rougeL", "exact"), p)) for p in per]
    if not per:
        return TextScores(0.0, 0.0, 0.0, 0.0, 0.0, pairs, rows)
    acc, r1, r2, rl, exact = (statistics.fmean(col) for col in zip(*per))
    return TextScores(acc, r1, r2, rl, exact, pairs, rows)
