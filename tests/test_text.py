"""Language-model updates: the checkpoint folder, the capture, DAGER's exact recovery, the text metrics."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("rouge_score")

from fedaudit.attacks.text import TEXT_ATTACKS  # noqa: E402
from fedaudit.client.text_capture import TextBatch, capture_text_gradient, text_gradient  # noqa: E402
from fedaudit.errors import InputError, NotApplicable  # noqa: E402
from fedaudit.io.text_checkpoint import load_text_checkpoint, save_text_checkpoint  # noqa: E402
from fedaudit.metrics.text import text_scores, token_accuracy  # noqa: E402
from fedaudit.models.text_tiny import gpt2, train_tokenizer  # noqa: E402

from .helpers import TEXT_LINES as LINES  # noqa: E402


def truth(batch):
    """Each line's tokens without the end-of-sequence token the capture adds (the invisible last position)."""
    return [batch.ids[i, : n - 1].tolist() for i, n in enumerate(batch.lengths)]


def test_dager_recovers_a_batch_of_four_exactly(tiny):
    ckpt = load_text_checkpoint(tiny)
    grads, meta, batch = capture_text_gradient(ckpt, LINES, max_length=12)
    assert meta.batch_size == 4 and meta.kind == "gradient"
    result = TEXT_ATTACKS.get("dager")().run(ckpt, grads, meta.batch_size)
    assert not result.diagnostics["saturated"] and result.diagnostics["consistent"] and all(result.exact)
    assert result.diagnostics["ranks"][0] == sum(n - 1 for n in batch.lengths)  # one direction per visible position
    assert result.diagnostics["unexplained_directions"] == 0  # the lines account for block 1's span
    true = truth(batch)
    assert sorted(result.sequences) == sorted(true)
    scores = text_scores(true, [ckpt.tokenizer.decode(s) for s in true], result.sequences,
                         [ckpt.tokenizer.decode(s) for s in result.sequences])
    assert scores.exact_rate == 1.0 and scores.token_accuracy == 1.0 and scores.rouge2 == pytest.approx(1.0)


def test_dager_says_when_the_span_is_full(tokenizer, tmp_path):
    """More visible positions than the model is wide: the gradient has full rank and nothing can be told apart."""
    ckpt = load_text_checkpoint(save_text_checkpoint(tmp_path / "narrow", gpt2(tokenizer, width=16), tokenizer))
    grads, meta, _ = capture_text_gradient(ckpt, LINES, max_length=12)
    result = TEXT_ATTACKS.get("dager")().run(ckpt, grads, meta.batch_size)
    assert result.diagnostics["saturated"] and result.sequences == []


def test_dager_needs_the_first_blocks_gradients(tiny):
    ckpt = load_text_checkpoint(tiny)
    grads, meta, _ = capture_text_gradient(ckpt, LINES[:2], max_length=8)
    del grads["transformer.h.1.attn.c_attn.weight"]
    with pytest.raises(NotApplicable, match="block 1"):
        TEXT_ATTACKS.get("dager")().run(ckpt, grads, meta.batch_size)


def test_a_folder_whose_tokenizer_does_not_fit_the_embedding_is_refused(tokenizer, tmp_path):
    small = train_tokenizer(400)
    save_text_checkpoint(tmp_path / "m", gpt2(small, width=16), tokenizer)  # the larger tokenizer beside it
    with pytest.raises(InputError, match="vocabulary has 2000 tokens"):
        load_text_checkpoint(tmp_path / "m")


def test_a_folder_with_weights_of_another_config_is_refused(tokenizer, tmp_path):
    path = save_text_checkpoint(tmp_path / "m", gpt2(tokenizer, width=16), tokenizer)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "n_embd": 32}))
    with pytest.raises(InputError, match="shape"):
        load_text_checkpoint(path)
    # an untied output matrix must be stored: only a tied one may be left out (it is the embedding)
    (path / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    with pytest.raises(InputError, match="missing tensor 'lm_head.weight'"):
        load_text_checkpoint(path)
    (path / "config.json").write_text(json.dumps({**config, "model_type": "mamba"}))
    with pytest.raises(InputError, match="not supported"):
        load_text_checkpoint(path)


def test_text_scores_match_and_grade():
    true = [[1, 2, 3, 4], [5, 6, 7, 8]]
    text = ["alpha beta gamma delta", "one two three four"]
    scores = text_scores(true, text, [[5, 6, 7, 9]], ["one two three five"])
    assert scores.pairs == [(0, None), (1, 0)]  # the recovered sequence goes to the one it resembles
    assert scores.exact_rate == 0.0
    assert scores.token_accuracy == pytest.approx(0.75 / 2)
    assert scores.rouge1 == pytest.approx(0.75 / 2)
    assert token_accuracy([1, 2], [1, 2, 3]) == 1.0 and token_accuracy([1, 2], [2]) == 0.0


def test_dager_checks_the_first_token_in_block_one(tiny):
    """Step 1 lets a token through at a position where sums of the batch's embeddings explain it: 11 at position 0,
    as E[11] + P[0] = (E[11] + P[1]) + (E[10] + P[0]) - (E[10] + P[1]) (exactly so at random init, where LayerNorm
    is a scaled projection). Block 1's check of the first position removes it."""
    ckpt = load_text_checkpoint(tiny)
    eos = ckpt.eos_id
    seqs = [[10, 11, 12, eos], [13, 10, 14, eos], [15, 16, 17, eos]]
    batch = TextBatch(torch.tensor(seqs), torch.ones(3, 4, dtype=torch.long), [4, 4, 4])
    result = TEXT_ATTACKS.get("dager")().run(ckpt, text_gradient(ckpt, batch), 3)
    assert 11 in ckpt_tokens_at_zero(ckpt, text_gradient(ckpt, batch))
    assert sorted(result.sequences) == sorted(s[:-1] for s in seqs) and all(result.exact)


def ckpt_tokens_at_zero(ckpt, grads):
    """Step 1's tokens at position 0."""
    from fedaudit.attacks.text.dager import TAU1, Dager, input_span
    from fedaudit.attacks.text.fronts import GPT2Front

    with torch.no_grad():
        return Dager()._tokens(GPT2Front(ckpt.model), input_span(ckpt, grads, 0, None), TAU1)[0]


def test_a_deltas_rank_is_read_against_its_round_off():
    from fedaudit.attacks.text.dager import noise_rank

    g = torch.Generator().manual_seed(0)
    w = torch.randn(96, 64, generator=g) * 0.02
    signal = torch.randn(96, 10, generator=g) @ torch.randn(10, 64, generator=g)
    for scale, rank in ((1e-4, 10), (1e-11, 0)):
        # the client's weights after the step, rounded to float32; the change recorded as their difference
        change = (w + scale * signal / signal.norm()) - w
        _, found, floor = noise_rank(change, w, 1, torch.float32)
        assert found == rank and (floor < 1e-2 if rank else floor == 1.0)


def test_a_gradients_rank_is_read_up_to_the_visible_tokens_where_its_fall_is_shallow():
    """A trained model's confident tokens leave weak directions: 12 directions from 1 down to 1e-5 over a round-off
    of 1e-8 fall by under GAP (1000x) at the rank, read as full; with at most 14 visible tokens (B times the positions
    shown) the values past 14 are round-off, and the largest fall up to there gives the 12."""
    from fedaudit.attacks.text.dager import GAP, span_basis

    g = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(48, 12, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(32, 12, generator=g, dtype=torch.float64))
    grad = u @ torch.diag(torch.logspace(0, -5, 12, dtype=torch.float64)) @ v.T
    grad = grad + 1e-8 * torch.randn(48, 32, generator=g, dtype=torch.float64) / 5
    s = torch.linalg.svdvals(grad)
    assert float(s[11] / s[12]) < GAP  # a shallow fall
    assert span_basis(grad, None)[1] == 32
    basis, rank, fall = span_basis(grad, None, limit=14)
    assert rank == 12 and basis.shape == (32, 12) and fall == pytest.approx(float(s[11] / s[12]))
    assert span_basis(grad, None, limit=40)[1] == 32  # a limit past the width changes nothing
    assert span_basis(grad, None, limit=14, least=13)[1] == 32  # fewer directions than the longest line's positions
    smooth = u @ torch.diag(torch.logspace(0, -8, 12, dtype=torch.float64)) @ v.T  # no fall stands out: BERT's 0.02
    assert span_basis(smooth + 1e-9 * torch.randn(48, 32, generator=g, dtype=torch.float64), None, 14, least=8)[1] == 32


def test_a_float32_gradients_rank_is_read_at_its_round_off_where_no_limit_applies():
    """A trained model's weak directions over float32 round-off with more possible visible tokens than the width (no
    limit applies): 40 directions from 1 down to 1e-5 over a round-off near 1e-8 fall by under GAP; nothing lies
    between float32's eps and NOISE_MARGIN eps (relative to the largest), so the 40 above are the rank. A spectrum
    that runs smoothly into the round-off keeps its full rank, as before."""
    from fedaudit.attacks.text.dager import GAP, span_basis

    g = torch.Generator().manual_seed(1)
    u, _ = torch.linalg.qr(torch.randn(300, 40, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(100, 40, generator=g, dtype=torch.float64))
    grad = (u @ torch.diag(torch.logspace(0, -5, 40, dtype=torch.float64)) @ v.T).float()
    grad = grad + 1e-8 / 27 * torch.randn(300, 100, generator=g)  # a float32 accumulation's round-off
    s = torch.linalg.svdvals(grad.double())
    assert float(s[39] / s[40]) < GAP and float(s[40] / s[0]) < torch.finfo(torch.float32).eps
    basis, rank, fall = span_basis(grad, None, limit=400)
    assert rank == 40 and basis.shape == (100, 40) and fall == pytest.approx(float(s[39] / s[40]), rel=1e-4)
    assert span_basis(grad, None, limit=400, least=41)[1] == 100  # fewer directions than the longest line's positions
    assert span_basis(grad.double(), None)[1] == 100  # in float64 the same values are far above its round-off
    u, _ = torch.linalg.qr(torch.randn(300, 100, generator=g, dtype=torch.float64))
    w, _ = torch.linalg.qr(torch.randn(100, 100, generator=g, dtype=torch.float64))
    smooth = (u @ torch.diag(torch.logspace(0, -9, 100, dtype=torch.float64)) @ w.T).float()
    assert span_basis(smooth, None, limit=400)[1] == 100


def test_dager_reads_a_shallow_fall_as_the_rank_and_widens_step_ones_threshold_to_it(tiny):
    """A trained model's block-0 gradient: round-off at 1% of its weakest direction (a fall of about 100x, under
    GAP) would read as full rank ("saturated"); up to the visible tokens the fall gives the rank, and step 1's
    threshold widens to the span's error (NOISE_MARGIN / fall): every line comes back."""
    from fedaudit.attacks.text.dager import GAP, NOISE_MARGIN

    ckpt = load_text_checkpoint(tiny)
    grads, meta, batch = capture_text_gradient(ckpt, LINES, max_length=12)
    key = "transformer.h.0.attn.c_attn.weight"  # Conv1D: in x out, the inputs' span is its column space
    g = grads[key].double()
    u, s, vh = torch.linalg.svd(g, full_matrices=False)
    r = sum(n - 1 for n in batch.lengths)
    noise = torch.randn(g.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    noise = noise - u[:, :r] @ (u[:, :r].T @ noise)  # outside the inputs' span
    grads[key] = (g + noise * float(s[r - 1]) / 100 / torch.linalg.matrix_norm(noise, 2)).float()
    result = TEXT_ATTACKS.get("dager")().run(ckpt, grads, meta.batch_size)
    d = result.diagnostics
    assert d["ranks"][0] == r and d["visible_limit"] >= r and not d["saturated"]
    assert 1e-3 < d["tau"][0] <= NOISE_MARGIN / 50 and d["tau"][0] > 2 * NOISE_MARGIN / GAP
    assert sorted(result.sequences) == sorted(truth(batch))


def test_lines_cut_short_at_a_fall_above_gap_are_searched_again_at_its_wedin_bound(tiny):
    """Round-off at 1/3,000 of block 0's weakest direction: a fall above GAP keeps step 1's 1e-5, which cuts true
    tokens (their distances reach about 1/fall); block 1's unexplained directions say so without the truth, and the
    second search at NOISE_MARGIN / fall returns every line, still certified by step 2's unwidened threshold."""
    from fedaudit.attacks.text.dager import GAP, NOISE_MARGIN, TAU1, TAU2

    ckpt = load_text_checkpoint(tiny)
    grads, meta, batch = capture_text_gradient(ckpt, LINES, max_length=12)
    key = "transformer.h.0.attn.c_attn.weight"
    g = grads[key].double()
    u, s, _ = torch.linalg.svd(g, full_matrices=False)
    r = sum(n - 1 for n in batch.lengths)
    noise = torch.randn(g.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    noise = noise - u[:, :r] @ (u[:, :r].T @ noise)
    grads[key] = (g + noise * float(s[r - 1]) / 3000 / torch.linalg.matrix_norm(noise, 2)).float()
    first = TEXT_ATTACKS.get("dager")(tau1=TAU1).run(ckpt, grads, meta.batch_size)  # the first search alone
    assert first.diagnostics["unexplained_directions"] > 0 and sorted(first.sequences) != sorted(truth(batch))
    result = TEXT_ATTACKS.get("dager")().run(ckpt, grads, meta.batch_size)
    d = result.diagnostics
    assert d["widened"] and d["unexplained_directions"] == 0 and d["ranks"][0] == r
    assert NOISE_MARGIN / GAP > d["tau"][0] > TAU1 and d["tau"][1] == TAU2
    assert sorted(result.sequences) == sorted(truth(batch)) and all(result.exact)
    clean = TEXT_ATTACKS.get("dager")().run(ckpt, capture_text_gradient(ckpt, LINES, max_length=12)[0], 4)
    assert not clean.diagnostics["widened"] and clean.diagnostics["tau"][0] == TAU1  # nothing unexplained: one search


def test_step_twos_threshold_widens_only_where_a_first_search_leaves_lines_short(tiny):
    """Round-off outside block 1's span at 1/100 of its weakest direction (a fall under GAP): step 2's threshold, which
    certifies the lines, stays at 1e-3 (up front it widened to the bound, 2e-2) and every line is exact. At 1/30 the
    last tokens fail 1e-3; the second search widens it by tens up to the bound and keeps the first that explains
    block 1's span with at most B lines."""
    from fedaudit.attacks.text.dager import NOISE_MARGIN, TAU2

    ckpt = load_text_checkpoint(tiny)
    clean, meta, batch = capture_text_gradient(ckpt, LINES, max_length=12)
    key = "transformer.h.1.attn.c_attn.weight"
    g = clean[key].double()
    u, s, _ = torch.linalg.svd(g, full_matrices=False)
    r = sum(n - 1 for n in batch.lengths)  # every prefix distinct: one block-1 input each
    noise = torch.randn(g.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    noise = noise - u[:, :r] @ (u[:, :r].T @ noise)
    for scale, widened in ((100, False), (30, True)):
        grads = {**clean, key: (g + noise * float(s[r - 1]) / scale / torch.linalg.matrix_norm(noise, 2)).float()}
        result = TEXT_ATTACKS.get("dager")().run(ckpt, grads, meta.batch_size)
        d = result.diagnostics
        assert d["widened"] is widened and d["unexplained_directions"] == 0
        assert (TAU2 < d["tau"][1] < NOISE_MARGIN / scale) if widened else d["tau"][1] == TAU2
        assert sorted(result.sequences) == sorted(truth(batch)) and all(result.exact)
    short = TEXT_ATTACKS.get("dager")(tau2=TAU2).run(ckpt, grads, meta.batch_size)  # 1/30, the first search alone
    assert short.diagnostics["unexplained_directions"] > 0 and not any(s in truth(batch) for s in short.sequences)


def test_directions_the_lines_do_not_explain_say_a_line_is_short_or_missing(tiny):
    """Truth-free: each distinct prefix of a returned line is one block-1 direction; a line cut short (here by a step-1
    threshold too tight for its later tokens) leaves directions over, and the reveal lines say so."""
    from fedaudit.attacks.text.dager import unexplained

    assert unexplained(7, [[1, 2, 3], [1, 2, 4, 5]], start=False) == 2  # prefixes: 1, 12, 123, 124, 1245
    assert unexplained(6, [[1, 2, 3], [1, 2, 4, 5]], start=True) == 0
    ckpt = load_text_checkpoint(tiny)
    grads, meta, batch = capture_text_gradient(ckpt, LINES, max_length=12)
    tight = TEXT_ATTACKS.get("dager")(tau1=1e-9).run(ckpt, grads, meta.batch_size)
    found = sum(len(s) for s in tight.sequences)
    assert found < sum(n - 1 for n in batch.lengths) and tight.diagnostics["unexplained_directions"] > 0


def test_the_text_corpus_is_frozen_not_read_from_the_running_python(monkeypatch):
    # the docstrings differ between Python releases; tokenizers, samples and tests read the frozen copy, so a
    # tokenizer trained with the live docstrings unavailable is the same one
    from fedaudit.models import text_tiny

    paragraphs = text_tiny.corpus()
    assert len(paragraphs) > 1000 and all(p and p == p.strip() and "\n" not in p for p in paragraphs)
    before = train_tokenizer(300).to_str()

    def unavailable(*a, **k):
        raise AssertionError("read the running Python's docstrings")

    monkeypatch.setattr(text_tiny, "docstrings", unavailable)
    monkeypatch.setattr(text_tiny.inspect, "getdoc", unavailable)
    assert train_tokenizer(300).to_str() == before
