"""Replaying a client's local round on the server: the K SGD steps of a FedAvg delta, each on a batch of recovered
lines, from the global weights. The weights step k's gradient was taken at are what DAGER's checks of step k's lines
need (docs/text.md, "FedAvg deltas"), and the replayed change against the recorded one says whether the recovered
batches are the client's."""

from __future__ import annotations

import copy

import torch

from fedaudit.attacks.text.embedding_matching import relative_residual
from fedaudit.client.local_sgd import client_optimizer
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.text_threat_model import LocalRound


class Replay:
    """A copy of the global model stepped as the client steps it (plain or heavy-ball SGD with the recorded learning
    rate, momentum and weight decay; the client's next-token loss on lines ended by the end-of-sequence token)."""

    def __init__(self, ckpt: TextCheckpoint, local: LocalRound):
        self.ckpt = ckpt
        self.model = copy.deepcopy(ckpt.model).eval()
        self.start = {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}
        self.opt = client_optimizer(self.model, local.lr, local.momentum, local.weight_decay)

    def step(self, sequences: list[list[int]]) -> None:
        """One local step on ``sequences`` (token ids without their end token); none (nothing recovered) leaves the
        weights where they are (a step the replay cannot take)."""
        from fedaudit.client.text_capture import client_batch, next_token_loss  # the client's loss, on the server

        if not sequences or any(not s for s in sequences):
            return
        with torch.enable_grad():
            self.opt.zero_grad()
            next_token_loss(self.model, client_batch(self.ckpt, sequences)).backward()
            self.opt.step()

    def residual(self, change: dict[str, torch.Tensor]) -> float:
        """|replayed change - recorded change| / |recorded change| over the parameters the update carries."""
        moved = {n: p.detach() - self.start[n] for n, p in self.model.named_parameters() if n in self.start}
        return relative_residual(moved, change)
