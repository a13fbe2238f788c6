"""A text classifier's batch labels, for the attacks that match its gradient (TAG and LAMP on a BERT classifier):
the bias-count rule (fedaudit/labels/bias_count.py; docs/methods/labels.md) on the classifier's output bias.

The mean cross-entropy's bias gradient is g = mean_n (p_n - y_n) exactly, so the counts are n = B (p - g); p, the
batch's mean softmax, is unknown to the server and stood in for by the model's mean softmax on PROBES random lines of
the batch's length (seeded), as bias-count stands in for it with auxiliary or Gaussian inputs. The counts are
projected on non-negative integers summing to B (``integer_counts``), and each dummy line gets one class (sorted:
the dummy lines are interchangeable)."""

from __future__ import annotations

import torch

from fedaudit.errors import NotApplicable
from fedaudit.io.text_checkpoint import TextCheckpoint
from fedaudit.labels.base import integer_counts
from fedaudit.models.text_families import FAMILIES
from fedaudit.text_threat_model import shown_length

PROBES = 64  # random lines whose mean softmax stands in for the batch's
PROBE_LENGTH = 16  # their length where the update does not show the batch's


def classifier_classes(ckpt: TextCheckpoint, gradients: dict[str, torch.Tensor], batch_size: int
                       ) -> tuple[torch.Tensor, list[float]]:
    """The batch's classes, one per line (sorted), and the raw counts; NotApplicable without the bias gradient."""
    head = FAMILIES[ckpt.model_type].head_bias
    if head is None or head not in gradients:
        raise NotApplicable(f"needs the classifier's bias gradient ({head}) to count the batch's labels")
    assert ckpt.start_id is not None
    g = gradients[head].detach().double()
    length = shown_length(ckpt, gradients) or min(PROBE_LENGTH, ckpt.positions)
    vocab = int(ckpt.model.get_input_embeddings().weight.shape[0])
    ids = torch.randint(vocab, (PROBES, length), generator=torch.Generator().manual_seed(0), device="cpu")
    ids[:, 0], ids[:, -1] = ckpt.start_id, ckpt.eos_id
    ids = ids.to(g.device)  # the same probes on every device, run on the model's
    with torch.no_grad():
        p = torch.softmax(ckpt.model(input_ids=ids, token_type_ids=torch.zeros_like(ids)).logits.double(), -1)
    raw = (batch_size * (p.mean(0) - g)).cpu()
    counts = integer_counts(raw, batch_size)
    return torch.repeat_interleave(torch.arange(len(counts), device="cpu"), counts), [round(float(r), 3) for r in raw]
