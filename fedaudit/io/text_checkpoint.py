"""A Hugging Face language-model folder as a checkpoint: ``config.json`` + ``model.safetensors`` + ``tokenizer.json``.

The model is built with ``transformers`` from its config (never downloaded, never unpickled) and its weights loaded
strictly from the safetensors file; the tokenizer is the folder's ``tokenizer.json`` read by ``tokenizers``. Needs the
``text`` extra (``pip install 'fedaudit[text]'``). docs/text.md says which families are supported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedaudit.errors import InputError
from fedaudit.io.checkpoint import load_state_strict
from fedaudit.io.files import (
    atomic_write_bytes,
    atomic_write_text,
    read_input_text,
    read_safetensors,
    safetensors_bytes,
    sha256_file,
)
from fedaudit.io.hf_folder import ADAPTER, CONFIG, TOKENIZER, WEIGHTS, is_text_checkpoint, read_config
from fedaudit.io.text_config import check_shapes, check_text_config
from fedaudit.models.text_extra import text_extra
from fedaudit.models.text_families import FAMILIES

ENCODER_SPECIALS = ("[CLS]", "[SEP]")  # an encoder's lines are [CLS] tokens [SEP] (BERT's single-sentence inputs)
PEFT_PREFIX = "base_model.model."  # PEFT's saved adapter names start so
LORA_PARTS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B")


@dataclass
class TextCheckpoint:
    """A language model, its tokenizer and what it was read from."""

    model: Any  # a transformers PreTrainedModel (its attributes are the family's)
    tokenizer: Any  # tokenizers.Tokenizer
    model_type: str
    kind: str  # "decoder" or "encoder"
    source: str
    sha256: str
    # a LoRA adapter on the model (fedaudit/io/text_adapter.py): its folder, base, rank, scaling, targets, name
    adapter: dict[str, Any] | None = None

    @property
    def eos_id(self) -> int:
        """The token that ends every line: a decoder's end-of-sequence, an encoder's [SEP]."""
        if self.kind == "encoder":
            return int(self.tokenizer.token_to_id("[SEP]"))
        return int(self.model.config.eos_token_id)

    @property
    def start_id(self) -> int | None:
        """The token that starts every line: an encoder's [CLS], a LLaMA's beginning-of-sequence token (its
        tokenizer adds one, and DAGER needs it: with rotary positions a line of one token repeated has the same
        block-1 input as the token alone); None for GPT-2 (it has none)."""
        if self.kind == "encoder":
            return int(self.tokenizer.token_to_id("[CLS]"))
        if FAMILIES[self.model_type].positions is None and self.model.config.bos_token_id is not None:
            return int(self.model.config.bos_token_id)
        return None

    @property
    def lead(self) -> int:
        """How many tokens the client puts before a line's text (its start token: 1, or 0)."""
        return int(self.start_id is not None)

    @property
    def pad_id(self) -> int:
        """The token that right-pads a batch: a decoder's end-of-sequence (GPT-2 has no pad), an encoder's pad."""
        if self.kind == "encoder":
            return int(self.model.config.pad_token_id or 0)
        return self.eos_id

    @property
    def width(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def positions(self) -> int:
        return int(self.model.config.max_position_embeddings)

    def update_key(self, name: str) -> str:
        """The name a client's upload uses for the model's parameter ``name``: itself, or for an adapter's tensor
        PEFT's saved name (``base_model.model.`` prefix, no adapter name: what ``get_peft_model_state_dict`` and
        FlowerTune send)."""
        if self.adapter is None:
            return name
        return PEFT_PREFIX + name.replace(f".{self.adapter['name']}.", ".")

    def param_key(self, key: str) -> str:
        """The model's parameter name for an upload's ``key`` (the inverse of :meth:`update_key`)."""
        if self.adapter is None:
            return key
        k = key[len(PEFT_PREFIX):] if key.startswith(PEFT_PREFIX) else key
        name = self.adapter["name"]
        for part in LORA_PARTS:
            if f".{part}.{name}." not in k:
                k = k.replace(f".{part}.", f".{part}.{name}.")
        return k


def refuse_adapter_without_base(folder: Path) -> None:
    """An adapter folder alone is not a model: say which base it names (fedaudit never downloads one)."""
    try:
        config = json.loads(read_input_text(folder / ADAPTER, "adapter config"))
        base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    except (OSError, ValueError):
        base = None
    names = f"names the base model {base!r}" if base else "does not name its base model"
    raise InputError(f"{str(folder)!r} is a PEFT adapter ({ADAPTER}) without its base model: it {names}, which is "
                     "not a folder here; pass that base model's folder (config.json, model.safetensors, "
                     "tokenizer.json) with --base (fedaudit never downloads one)")


def _config(folder: Path) -> dict:
    config = read_config(folder / CONFIG)
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise InputError(f"{folder / CONFIG}: model_type {model_type!r} is not supported "
                         f"(supported: {', '.join(FAMILIES)})")
    return config


def load_text_checkpoint(path: str | Path) -> TextCheckpoint:
    """Build the folder's model from its config, load its weights strictly, read its tokenizer; every mismatch (a
    missing or extra tensor, a shape, a tokenizer whose vocabulary the embedding cannot hold) is an InputError."""
    folder = Path(path)
    if not is_text_checkpoint(folder):
        raise InputError(f"{str(folder)!r} is not a language-model folder (no {CONFIG})")
    if not (folder / CONFIG).is_file():
        refuse_adapter_without_base(folder)
    config = _config(folder)
    transformers = text_extra()
    from tokenizers import Tokenizer

    check_text_config(config, str(folder / CONFIG))  # types and bounds before anything is sized from them
    state, _ = read_safetensors(folder / WEIGHTS, "language-model weights")
    family = FAMILIES[config["model_type"]]
    try:
        hf_config = transformers.AutoConfig.for_model(**config)
        with torch.device("meta"):  # no memory: the shapes the config implies, checked against the file's
            check_shapes(getattr(transformers, family.cls_name)(hf_config), state, str(folder / CONFIG))
        with torch.device("cpu"):
            model = getattr(transformers, family.cls_name)(hf_config)
    except (TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
        raise InputError(f"{folder / CONFIG}: cannot build the model ({exc})") from None
    output, embedding = family.output, family.embedding
    if output and hf_config.tie_word_embeddings and output not in state and embedding in state:
        state = {**state, output: state[embedding]}  # tied: the output matrix is the embedding, stored once
    load_state_strict(model, state, str(folder / WEIGHTS))  # missing, extra, misshapen, NaN/Inf: one line each
    model.eval()
    try:
        tokenizer = Tokenizer.from_str(read_input_text(folder / TOKENIZER, "tokenizer"))
    except Exception as exc:  # tokenizers raises its own Exception type for a bad file
        raise InputError(f"{folder / TOKENIZER}: not a readable tokenizer ({exc})") from None
    rows = model.get_input_embeddings().weight.shape[0]
    if tokenizer.get_vocab_size() > rows:
        raise InputError(f"{folder / TOKENIZER}: its vocabulary has {tokenizer.get_vocab_size()} tokens, the model's "
                         f"embedding {rows} rows (a tokenizer of another model?)")
    if family.kind == "encoder":
        missing = [t for t in ENCODER_SPECIALS if tokenizer.token_to_id(t) is None]
        if missing:
            raise InputError(f"{folder / TOKENIZER}: an encoder's tokenizer needs {' and '.join(ENCODER_SPECIALS)} "
                             f"(its lines are [CLS] tokens [SEP]); this one lacks {', '.join(missing)}")
    return TextCheckpoint(model, tokenizer, config["model_type"], family.kind, str(folder),
                          sha256_file(folder / WEIGHTS))


def save_text_checkpoint(path: str | Path, model: Any, tokenizer: Any) -> Path:
    """Write ``model`` and ``tokenizer`` as a folder :func:`load_text_checkpoint` reads (each file atomically)."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    output = FAMILIES[model.config.model_type].output
    tied = model.config.tie_word_embeddings  # the output matrix is the embedding's: stored once
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items() if not (tied and k == output)}
    atomic_write_bytes(folder / WEIGHTS, safetensors_bytes(state, {"format": "pt"}))
    atomic_write_text(folder / CONFIG, json.dumps(model.config.to_diff_dict(), indent=1, sort_keys=True))
    atomic_write_text(folder / TOKENIZER, tokenizer.to_str())
    return folder
