"""The language-model families fedaudit reads, and where each keeps what the text attacks need: the transformers
class a checkpoint builds, whether it is a decoder (next-token loss) or an encoder (sequence classification), and the
modules whose weights take a block's attention inputs (DAGER's span checks read their gradients). A family not listed
is refused rather than guessed (docs/text.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TextFamily:
    cls_name: str  # the transformers class built from the config
    kind: str  # "decoder" (next-token loss) or "encoder" (sequence classification, [CLS] ... [SEP])
    attention: tuple[str, ...]  # block {layer}'s attention-input modules (their weights' gradients share the inputs)
    transposed: bool  # GPT-2's Conv1D stores its weight in x out; a Linear out x in
    positions: str  # the position embedding (its gradient's non-zero rows give a batch's padded length)
    head_bias: str | None = None  # a classifier's output bias (its gradient counts the batch's labels)


FAMILIES = {
    "gpt2": TextFamily("GPT2LMHeadModel", "decoder", ("transformer.h.{layer}.attn.c_attn",), True,
                       "transformer.wpe.weight"),
    # query, key and value share block {layer}'s input: their gradients' rows, stacked, hold every visible position's
    # input (the query's alone misses most positions in the model's last layer, which reads only [CLS])
    "bert": TextFamily("BertForSequenceClassification", "encoder",
                       tuple(f"bert.encoder.layer.{{layer}}.attention.self.{m}" for m in ("query", "key", "value")),
                       False, "bert.embeddings.position_embeddings.weight", "classifier.bias"),
}


def attention_modules(model_type: str, layer: int) -> list[str]:
    """Block ``layer``'s attention-input modules in ``model_type``'s parameter names."""
    return [m.format(layer=layer) for m in FAMILIES[model_type].attention]
