"""The biases of a group of copied rows sorted into a ladder: thresholds -b_i / s_i along the shared direction that
rise with the row index, the bins of Robbing the Fed's imprint (quantiles of a Normal or Laplace fitted to the
input's projection). With them, bin i's gradient minus bin i+1's isolates the inputs between two thresholds."""

from __future__ import annotations

import torch

from fedaudit.scan.finding import Finding
from fedaudit.scan.registry import CHECKS
from fedaudit.scan.subject import Subject

MIN_ROWS = 4
LADDER_RHO = 0.99


def _spearman(x: torch.Tensor) -> float:
    """Spearman's rank correlation of ``x`` with its index (ties broken by position: enough for a ladder)."""
    r = torch.argsort(torch.argsort(x)).to(torch.float64)
    i = torch.arange(x.numel(), dtype=torch.float64)
    r, i = r - r.mean(), i - i.mean()
    return float((r * i).sum() / (r.norm() * i.norm()).clamp_min(1e-30))


class BiasLadder:
    name = "bias-ladder"
    statistic = "|Spearman| of a copied-row group's thresholds (-bias / row scale) against the row index"

    def __call__(self, subject: Subject) -> list[Finding]:
        out = []
        for name, m in subject.matrices(min_rows=MIN_ROWS):
            bias = subject.tensors.get(name[: -len("weight")] + "bias")
            if bias is None or bias.ndim != 1 or bias.numel() != m.shape[0]:
                continue
            for group in map(sorted, subject.copies(name, m)):
                if len(group) < MIN_ROWS:
                    continue
                rows = m[group]
                direction = rows[0] / rows[0].norm()
                scale = rows @ direction  # signed: a negated copy points the other way
                thresholds = -bias[group].to(scale.dtype) / scale
                distinct = int(torch.unique(thresholds.round(decimals=9)).numel())
                rho = abs(_spearman(thresholds))
                if distinct < MIN_ROWS or rho < LADDER_RHO:
                    continue
                out.append(Finding(
                    self.name, name[: -len("weight")] + "bias", self.statistic, round(rho, 4),
                    "no copied rows in benign checkpoints, so no ladder",
                    "high", "imprint bins (Robbing the Fed; sparse imprint, one-shot)",
                    "each input alone in a bin, exactly, for batches of hundreds",
                    f"{len(group)} copied rows with {distinct} distinct thresholds from {float(thresholds.min()):.3g} "
                    f"to {float(thresholds.max()):.3g}", {"rows": len(group)}))
        return out


CHECKS.register(BiasLadder())
