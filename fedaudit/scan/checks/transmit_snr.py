"""SEER's Transmit-SNR (Garov et al., ICLR 2024, detectability appendix): over the first convolution's kernels, the
largest |w| over the sum of the rest. A kernel that transmits one pixel (a delta) is infinite; SEER's benign and
disguised checkpoints stay below 1."""

from __future__ import annotations

import torch

from fedaudit.scan.finding import Finding
from fedaudit.scan.registry import CHECKS
from fedaudit.scan.subject import Subject

LIMIT = 1.0
MIN_WEIGHTS = 9


class TransmitSNR:
    name = "transmit-snr"
    statistic = "Transmit-SNR: max over the first layer's kernels of max|w| / (sum|w| - max|w|)"

    def __call__(self, subject: Subject) -> list[Finding]:
        first = next((n for n, w in subject.tensors.items() if w.ndim == 4 and n.endswith("weight")), None)
        if first is None:
            return []
        w = subject.tensors[first].abs().reshape(subject.tensors[first].shape[0], -1).double()
        if w.shape[1] < MIN_WEIGHTS:  # a kernel of 1x1 over three channels is a largest weight beside two
            return []
        top = w.amax(1)
        rest = w.sum(1) - top
        snr = float(torch.where(rest > 0, top / rest.clamp_min(1e-300), torch.where(top > 0, float("inf"), 0.0)).max())
        if snr <= LIMIT:
            return []
        return [Finding(self.name, first, self.statistic, snr, "below 1 (SEER's benign and SEER checkpoints)",
                        "medium", "a first layer that transmits single pixels (a linearised stack, an imprint)",
                        "the pixels it transmits reach later layers unmixed", f"{snr:.3g} > {LIMIT}")]


CHECKS.register(TransmitSNR())
