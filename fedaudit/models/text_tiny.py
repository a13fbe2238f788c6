"""Small language models built offline, for tests, samples and benchmarks: a byte-level BPE tokenizer trained by
``tokenizers`` on text that ships with Python (the standard library's docstrings), and GPT-2-shaped decoders at random
init built from a ``transformers`` config (nothing downloaded)."""

from __future__ import annotations

import importlib
import inspect
import warnings
from typing import Any

import torch

from fedaudit.models.text_extra import text_extra

EOS = "<|endoftext|>"
# standard-library modules whose docstrings train the tokenizer (present on every Python fedaudit supports)
CORPUS_MODULES = ("argparse", "collections", "dataclasses", "functools", "inspect", "itertools", "json", "logging",
                  "os", "pathlib", "re", "shutil", "string", "subprocess", "textwrap", "typing", "unittest", "zipfile")


def corpus() -> list[str]:
    """Every docstring of the CORPUS_MODULES' public members, one paragraph a line."""
    lines: list[str] = []
    with warnings.catch_warnings():  # some members are deprecated aliases (typing.io) that warn when read
        warnings.simplefilter("ignore")
        for name in CORPUS_MODULES:
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


def add_lora(ckpt: Any, r: int = 16, alpha: float | None = None, targets: tuple[str, ...] = ("c_attn",),
             seed: int = 0, fresh: bool = False) -> dict[str, Any]:
    """Inject a LoRA adapter into ``ckpt``'s model with ``peft`` (in place) and return its adapter_config.json fields.
    Its A is PEFT's initialisation; its B is N(0, 0.02) (a fine-tuned adapter), or zero with ``fresh`` (a new one)."""
    import peft

    config: dict[str, Any] = {"r": r, "lora_alpha": alpha or r, "target_modules": list(targets), "fan_in_fan_out": True,
              "lora_dropout": 0.0, "bias": "none"}
    torch.manual_seed(seed)
    ckpt.model = peft.inject_adapter_in_model(peft.LoraConfig(**config), ckpt.model, adapter_name="default").eval()
    ckpt.adapter = {"name": "default"}
    with torch.no_grad():
        for name, p in ckpt.model.named_parameters():
            if ".lora_B." in name:
                p.zero_() if fresh else p.normal_(0.0, 0.02)
    return config
