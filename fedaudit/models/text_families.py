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
    positions: str | None  # the learned position embedding (its gradient's non-zero rows give a batch's padded
    # length); None for rotary positions (LLaMA), which enter after the attention's projections
    embedding: str  # the input embedding's parameter name
    output: str | None = None  # a decoder's output matrix (stored once where the config ties it to the embedding)
    head_bias: str | None = None  # a classifier's output bias (its gradient counts the batch's labels)


FAMILIES = {
    "gpt2": TextFamily("GPT2LMHeadModel", "decoder", ("transformer.h.{layer}.attn.c_attn",), True,
                       "transformer.wpe.weight", "transformer.wte.weight", "lm_head.weight"),
    # rotary positions: block 0's attention input RMSNorm(E[v]) is the same at every position (the paper's
    # position-free step 1); q, k and v share the input (k and v narrower under grouped-query attention)
    "llama": TextFamily("LlamaForCausalLM", "decoder",
                        tuple(f"model.layers.{{layer}}.self_attn.{m}" for m in ("q_proj", "k_proj", "v_proj")),
                        False, None, "model.embed_tokens.weight", "lm_head.weight"),
    # query, key and value share block {layer}'s input: their gradients' rows, stacked, hold every visible position's
    # input (the query's alone misses most positions in the model's last layer, which reads only [CLS])
    "bert": TextFamily("BertForSequenceClassification", "encoder",
                       tuple(f"bert.encoder.layer.{{layer}}.attention.self.{m}" for m in ("query", "key", "value")),
                       False, "bert.embeddings.position_embeddings.weight", "bert.embeddings.word_embeddings.weight",
                       None, "classifier.bias"),
}


def attention_modules(model_type: str, layer: int) -> list[str]:
    """Block ``layer``'s attention-input modules in ``model_type``'s parameter names."""
    return [m.format(layer=layer) for m in FAMILIES[model_type].attention]
