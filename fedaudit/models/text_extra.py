"""The ``text`` extra's import: ``transformers`` for language models, or one clear line on how to install it."""

from __future__ import annotations

from typing import Any

from fedaudit.errors import InputError


def text_extra() -> Any:
    """``transformers``, or an InputError saying how to install it (the text extra is optional)."""
    try:
        import transformers
    except ImportError:
        raise InputError("language-model checkpoints need the text extra: pip install 'fedaudit[text]'") from None
    transformers.logging.set_verbosity_error()  # its notices (a config's unset loss type) are not the user's business
    return transformers
