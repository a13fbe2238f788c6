"""What tells a Hugging Face folder (a language model or a PEFT adapter) from a fedaudit checkpoint file: read by the
image loader to refuse it with one line and by the text commands to take it (fedaudit/io/text_checkpoint.py)."""

from __future__ import annotations

from pathlib import Path

CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.json"
ADAPTER = "adapter_config.json"  # a PEFT adapter folder: the weights of a base model it names, not a model


def is_text_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding a Hugging Face model or adapter config (a text checkpoint, not a fedaudit
    one)."""
    p = Path(path)
    return p.is_dir() and ((p / CONFIG).is_file() or (p / ADAPTER).is_file())
