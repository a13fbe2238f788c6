"""A Hugging Face ``config.json`` checked before any model is built from it (issue 88): its fields size every
allocation (a ``vocab_size`` of 1e12, an ``n_layer`` of 1e5, ``n_head`` 0 ended in exit 3 or an out-of-memory), and an
``attn_implementation`` naming a kernel repository makes transformers fetch and run code.

Checked: every field that sizes the model is an integer (not a bool, not 96.5, not "96") within a bound no released
model of the family exceeds; widths divide into their heads; the attention implementation is one that runs here
(eager, sdpa). Then the model is built on PyTorch's ``meta`` device (no memory) and its tensors' shapes are compared
with the weights file's: a config that disagrees with the weights it ships is refused before the real build, whose
size is then what the file holds.
"""

from __future__ import annotations

from typing import Any

from fedaudit.errors import InputError

# field -> (minimum, maximum); above the largest released models of each family (Gemma's 256k vocabulary, 128k
# positions, LLaMA-3-405B's 16,384 width and 126 layers), far below what exhausts a machine's memory
BOUNDS = {
    "vocab_size": (1, 1 << 20), "n_embd": (1, 1 << 16), "hidden_size": (1, 1 << 16), "n_layer": (1, 512),
    "num_hidden_layers": (1, 512), "n_head": (1, 1024), "num_attention_heads": (1, 1024),
    "num_key_value_heads": (1, 1024), "n_positions": (1, 1 << 20), "n_ctx": (1, 1 << 20),
    "max_position_embeddings": (1, 1 << 20), "n_inner": (1, 1 << 18), "intermediate_size": (1, 1 << 18),
    "type_vocab_size": (1, 1024), "num_labels": (1, 1 << 16),
}
WIDTH_HEADS = (("n_embd", "n_head"), ("hidden_size", "num_attention_heads"))
ATTENTION = (None, "eager", "sdpa")


def check_text_config(config: dict[str, Any], source: str) -> None:
    """One InputError line for the first field out of its type or bound (``source``: the config's path)."""
    for key, (lo, hi) in BOUNDS.items():
        if key not in config or config[key] is None:
            continue
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"{source}: {key} must be an integer, got {v!r}")
        if not lo <= v <= hi:
            raise InputError(f"{source}: {key} = {v} is outside [{lo}, {hi}]")
    for w, h in WIDTH_HEADS:
        if w in config and h in config and config[w] % config[h]:
            raise InputError(f"{source}: {w} = {config[w]} does not divide into {h} = {config[h]}")
    n_heads, kv = config.get("num_attention_heads"), config.get("num_key_value_heads")
    if n_heads and kv and n_heads % kv:
        raise InputError(f"{source}: num_attention_heads = {n_heads} is not a multiple of num_key_value_heads = {kv}")
    for key in ("attn_implementation", "_attn_implementation"):
        if config.get(key) not in ATTENTION:
            raise InputError(f"{source}: {key} = {config[key]!r} is not one fedaudit runs (eager or sdpa; a kernel "
                             "repository or flash attention would fetch or need code outside the install)")


def check_shapes(model: Any, state: dict[str, Any], source: str) -> None:
    """The ``meta`` model's tensors against the weights file's shapes (names are ``load_state_strict``'s to check)."""
    for name, t in model.state_dict().items():
        have = state.get(name)
        if have is not None and tuple(have.shape) != tuple(t.shape):
            raise InputError(f"{source}: the config builds {name} with shape {list(t.shape)}, the weights hold "
                             f"shape {list(have.shape)} (a config of another model?)")
