"""What a decoder's first two blocks' attention inputs are computed from, per family, for DAGER's span checks
(fedaudit/attacks/text/dager.py): block 0's input for every vocabulary entry at a position (step 1), and block 1's
input at the last position of candidate sequences (step 2). An encoder's is in dager_encoder.py."""

from __future__ import annotations

from typing import Any

import torch


def _tensor(h: Any) -> torch.Tensor:
    return h[0] if isinstance(h, tuple) else h


class GPT2Front:
    """Learned positions: block 0's input is ``ln_1(E[v] + P[p])``, a different check at every position."""

    position_free = False

    def __init__(self, model: Any):
        tr = model.transformer
        self.embed, self.positions, self.block0, self.ln1 = tr.wte.weight, tr.wpe.weight, tr.h[0], tr.h[1].ln_1

    @property
    def max_positions(self) -> int:
        return int(self.positions.shape[0])

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def token_inputs(self, position: int) -> torch.Tensor:
        return self.block0.ln_1(self.embed + self.positions[position])

    def last_inputs(self, seqs: torch.Tensor) -> torch.Tensor:
        """Block 1's input at each sequence's last position. The last position attends to every earlier one, so
        causal and full attention agree there and block 0 runs without a mask."""
        h = _tensor(self.block0(self.embed[seqs] + self.positions[: seqs.shape[1]]))
        return self.ln1(h[:, -1])


class LlamaFront:
    """Rotary positions (LLaMA): they rotate the queries and keys after the projections, so block 0's input
    ``RMSNorm(E[v])`` is the same at every position and step 1 gives the batch's token set once (the paper's
    position-free pass); step 2 extends sequences from that set, block 0 run with the positions 0..n-1 a
    right-padded line has (no BOS: fedaudit's capture adds none)."""

    position_free = True

    def __init__(self, model: Any):
        m = model.model
        self.embed, self.layer0, self.ln1, self.rotary = (m.embed_tokens.weight, m.layers[0],
                                                          m.layers[1].input_layernorm, m.rotary_emb)
        self.max_positions = int(model.config.max_position_embeddings)

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def token_inputs(self, position: int) -> torch.Tensor:
        return self.layer0.input_layernorm(self.embed)

    def last_inputs(self, seqs: torch.Tensor) -> torch.Tensor:
        h = self.embed[seqs]
        pos = torch.arange(seqs.shape[1], device=seqs.device).expand(seqs.shape[0], -1)
        h = _tensor(self.layer0(h, position_ids=pos, position_embeddings=self.rotary(h, pos)))
        return self.ln1(h[:, -1])


def decoder_front(model: Any, model_type: str) -> GPT2Front | LlamaFront:
    return LlamaFront(model) if model_type == "llama" else GPT2Front(model)
