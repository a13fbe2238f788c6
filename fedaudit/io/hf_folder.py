"""What tells a Hugging Face folder (a language model or a PEFT adapter) from a fedaudit checkpoint file: read by the
image loader to refuse it with one line and by the text commands to take it (fedaudit/io/text_checkpoint.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedaudit.errors import InputError
from fedaudit.io.files import read_input_text

CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.json"
ADAPTER = "adapter_config.json"  # a PEFT adapter folder: the weights of a base model it names, not a model


def is_text_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding a Hugging Face model or adapter config (a text checkpoint, not a fedaudit
    one)."""
    p = Path(path)
    return p.is_dir() and ((p / CONFIG).is_file() or (p / ADAPTER).is_file())


def read_config(path: Path) -> dict[str, Any]:
    """A folder's JSON config (``config.json``, ``adapter_config.json``) as a dict, or one InputError line."""
    text = read_input_text(path, "config")
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not a readable JSON config ({exc})") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: not a JSON object")
    return config
