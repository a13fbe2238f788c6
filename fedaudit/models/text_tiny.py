"""Small language models built offline, for tests, samples and benchmarks: tokenizers trained by ``tokenizers`` on
text that ships with Python (the standard library's docstrings; byte-level BPE for GPT-2, WordPiece for BERT), and
GPT-2- and LLaMA-shaped decoders and BERT-shaped classifiers at random init built from ``transformers`` configs (nothing
downloaded).

The docstrings differ from one Python release to the next, and a tokenizer trained on them with them, so the text
is frozen: ``text_corpus.txt`` beside this module holds the CORPUS_MODULES' docstrings as Python 3.11.7 has them
(``python -m fedaudit.models.text_tiny --freeze`` rewrote it), and ``corpus()`` reads that file, so tokenizers,
samples, tests and benchmark sentences are the same on every Python fedaudit supports. ``docstrings()`` reads a
running Python's own (benchmarks/text_pretrain.py's training text).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from fedaudit.models.text_extra import text_extra

EOS = "<|endoftext|>"
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # BERT's, first (ids 0-4; [PAD] = 0)
# standard-library modules whose docstrings train the tokenizer (present on every Python fedaudit supports)
CORPUS_MODULES = ("argparse", "collections", "dataclasses", "functools", "inspect", "itertools", "json", "logging",
                  "os", "pathlib", "re", "shutil", "string", "subprocess", "textwrap", "typing", "unittest", "zipfile")


FROZEN = Path(__file__).with_name("text_corpus.txt")


def corpus() -> list[str]:
    """The CORPUS_MODULES' docstrings frozen at Python 3.11.7 (``FROZEN``), one paragraph a line, in ``docstrings``'
    order: the same text on every Python."""
    return FROZEN.read_text(encoding="utf-8").splitlines()


def docstrings(modules: tuple[str, ...] = CORPUS_MODULES) -> list[str]:
    """Every docstring of the ``modules``' public members on the running Python, one paragraph a line."""
    lines: list[str] = []
    with warnings.catch_warnings():  # some members are deprecated aliases (typing.io) that warn when read
        warnings.simplefilter("ignore")
        for name in modules:
            module = importlib.import_module(name)
            for obj in [module, *(getattr(module, a) for a in dir(module) if not a.startswith("_"))]:
                if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj):
                    doc = inspect.getdoc(obj)
                    if doc:
                        lines += [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]
    return lines


def train_tokenizer(vocab_size: int = 2000, extra: list[str] | None = None) -> Any:
    """A byte-level BPE tokenizer (GPT-2's scheme) of ``vocab_size`` entries, the end-of-text token first."""
    text_extra()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sorted(set(corpus() + (extra or []))), trainer)
    return tok


def train_wordpiece(vocab_size: int = 2000) -> Any:
    """A lower-casing WordPiece tokenizer (BERT's scheme) of ``vocab_size`` entries: BERT_SPECIALS first (ids 0-4),
    every character of the corpus alone and as a continuation (``##c``), then the most frequent pieces: whole words,
    word beginnings and word endings (``##ing``), each counted by the words it occurs in (ties in alphabetical
    order); WordPiece's longest-match reading spells a word from them. Built by counting rather than by
    ``tokenizers``' WordPiece trainer, whose vocabulary differs from run to run (its ties follow hash order), so tests
    and benchmarks regenerate. It adds no special tokens itself: the client frames each line as [CLS] tokens [SEP]
    (fedaudit/client/text_capture.py)."""
    text_extra()
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    norm, split = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    words: Counter[str] = Counter()
    for line in sorted(set(corpus())):
        words.update(w for w, _ in split.pre_tokenize_str(norm.normalize_str(line)))
    chars = sorted({c for w in words for c in w})
    vocab = [*BERT_SPECIALS, *chars, *(f"##{c}" for c in chars)]
    pieces: Counter[str] = Counter()
    for w, n in words.items():
        pieces[w] += n
        for i in range(2, len(w)):
            pieces[w[:i]] += n  # a beginning
            pieces[f"##{w[i - 1:]}"] += n  # an ending
    taken = set(vocab)
    vocab += [p for p, _ in sorted(pieces.items(), key=lambda kv: (-kv[1], kv[0])) if p not in taken]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab[:vocab_size])}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = norm, split, decoders.WordPiece()
    return tok


def bert(tokenizer: Any, width: int = 64, layers: int = 3, heads: int = 2, positions: int = 64, labels: int = 2,
         seed: int = 0, init_range: float = 0.1, vocab_size: int | None = None) -> torch.nn.Module:
    """A BERT sequence classifier at random init (seeded) for ``tokenizer``'s vocabulary (``vocab_size`` embedding
    rows where given, e.g. BERT's 30,522), in eval mode.

    ``init_range`` is the config's initializer_range (BERT's default 0.02): at 0.02 a random-init encoder barely
    mixes its tokens (block 1's input moves by about 1e-3 of its length when another token of the line changes, the
    size of float32's round-off in the gradient's weak directions), unlike a trained one; 0.1 mixes them as trained
    models do (a changed token moves it by 1e-2 to 1e-1), so tests exercise what a trained model shows."""
    transformers = text_extra()
    config = transformers.BertConfig(vocab_size=vocab_size or tokenizer.get_vocab_size(), hidden_size=width, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=4 * width,
                                     max_position_embeddings=positions, num_labels=labels,
                                     pad_token_id=tokenizer.token_to_id("[PAD]"), initializer_range=init_range)
    torch.manual_seed(seed)
    return transformers.BertForSequenceClassification(config).eval()


def gpt2(tokenizer: Any, width: int = 64, layers: int = 2, heads: int = 2, positions: int = 64, seed: int = 0,
         vocab_size: int | None = None) -> torch.nn.Module:
    """A GPT-2 decoder at random init (seeded) for ``tokenizer``'s vocabulary (``vocab_size`` embedding rows where
    given, e.g. GPT-2's 50,257 for a smaller tokenizer), in eval mode."""
    transformers = text_extra()
    eos = tokenizer.token_to_id(EOS)
    config = transformers.GPT2Config(vocab_size=vocab_size or tokenizer.get_vocab_size(), n_positions=positions, n_embd=width,
                                     n_layer=layers, n_head=heads, bos_token_id=eos, eos_token_id=eos)
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(config).eval()


def llama(tokenizer: Any, width: int = 64, layers: int = 2, heads: int = 2, kv_heads: int | None = None,
          positions: int = 64, seed: int = 0, vocab_size: int | None = None) -> torch.nn.Module:
    """A LLaMA decoder (rotary positions, RMSNorm, SwiGLU; grouped-query attention with ``kv_heads``) at random init
    (seeded) for ``tokenizer``'s vocabulary (``vocab_size`` embedding rows where given, e.g. LLaMA-2's 32,000),
    untied, in eval mode."""
    transformers = text_extra()
    eos = tokenizer.token_to_id(EOS)
    config = transformers.LlamaConfig(vocab_size=vocab_size or tokenizer.get_vocab_size(), hidden_size=width,
                                      intermediate_size=4 * width, num_hidden_layers=layers, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads or heads, max_position_embeddings=positions,
                                      bos_token_id=eos, eos_token_id=eos, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


def add_lora(ckpt: Any, r: int = 16, alpha: float | None = None, targets: tuple[str, ...] | None = None,
             seed: int = 0, fresh: bool = False) -> dict[str, Any]:
    """Inject a LoRA adapter into ``ckpt``'s model with ``peft`` (in place) and return its adapter_config.json fields.
    Its A is PEFT's initialisation; its B is N(0, 0.02) (a fine-tuned adapter), or zero with ``fresh`` (a new one).
    ``targets``: GPT-2's c_attn, BERT's query, key and value, or LLaMA's q/k/v_proj by default."""
    import peft

    defaults = {"bert": ("query", "key", "value"), "llama": ("q_proj", "k_proj", "v_proj")}
    modules: tuple[str, ...] = targets or defaults.get(ckpt.model_type) or ("c_attn",)
    config: dict[str, Any] = {"r": r, "lora_alpha": alpha or r, "target_modules": list(modules),
                              "fan_in_fan_out": ckpt.model_type == "gpt2", "lora_dropout": 0.0, "bias": "none"}
    torch.manual_seed(seed)
    ckpt.model = peft.inject_adapter_in_model(peft.LoraConfig(**config), ckpt.model, adapter_name="default").eval()
    ckpt.adapter = {"name": "default"}
    with torch.no_grad():
        for name, p in ckpt.model.named_parameters():
            if ".lora_B." in name:
                p.zero_() if fresh else p.normal_(0.0, 0.02)
    return config


if __name__ == "__main__":
    if sys.argv[1:] != ["--freeze"]:
        raise SystemExit("usage: python -m fedaudit.models.text_tiny --freeze  (rewrites text_corpus.txt from this "
                         "Python's docstrings; the file in the repository is Python 3.11.7's)")
    paragraphs = docstrings()
    FROZEN.write_text("".join(f"{line}\n" for line in paragraphs), encoding="utf-8")
    print(f"{FROZEN}: {len(paragraphs)} paragraphs from Python {sys.version.split()[0]}")
