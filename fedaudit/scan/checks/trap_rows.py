"""Trap weights (Boenisch et al., "When the curious abandon honesty"): each row holds Gaussian draws a_j and, at other
positions, -s * a_j with one factor s just under 1 (0.95 by default), so a row fires for few inputs and its gradient
is one input. The statistic: the share of a row's entries whose opposite-signed partner at ratio s is also in the
row (s read from the row's largest entries); a Gaussian row's entries have no such partners."""

from __future__ import annotations

import torch

from fedaudit.scan.finding import Finding
from fedaudit.scan.registry import CHECKS
from fedaudit.scan.subject import Subject

PAIRED = 0.9      # a row is a trap row when this share of its entries is paired
HIGH_ROWS = 4
REL_TOL = 1e-5
MAX_ENTRIES = 8_000_000  # above this many entries a layer is read on its first 4,096 rows
MIN_COLS = 32


def paired_share(m: torch.Tensor, top: int = 3) -> torch.Tensor:
    """Per row: the largest share of entries with an opposite-signed partner at ratio s (or 1 / s), over candidate
    s read from the ratios of the row's ``top`` largest positive and negative magnitudes."""
    m = m.to(torch.float64)
    inf = torch.tensor(float("inf"), dtype=m.dtype)
    pos = torch.sort(torch.where(m > 0, m, inf), dim=1).values
    neg = torch.sort(torch.where(m < 0, -m, inf), dim=1).values.contiguous()
    n_pos, n_neg = (m > 0).sum(1), (m < 0).sum(1)
    big_pos = torch.sort(torch.where(m > 0, m, -inf), dim=1, descending=True).values[:, :top]
    big_neg = torch.sort(torch.where(m < 0, -m, -inf), dim=1, descending=True).values[:, :top]
    best = torch.zeros(m.shape[0], dtype=m.dtype)
    finite_pos = torch.isfinite(pos)
    for i in range(top):
        for j in range(top):
            s = (big_neg[:, j] / big_pos[:, i]).unsqueeze(1)  # |negative| = s * positive
            # a ratio of 1 is a row holding w and -w (a cosine query, an antisymmetric kernel): the duplicate-row
            # check's, not a trap; trap factors are "just under 1" (0.95 by default)
            s = torch.where(torch.isfinite(s) & (s > 0) & ((s - 1).abs() > 1e-3), s, torch.full_like(s, float("nan")))
            hit = torch.zeros_like(finite_pos)
            for want in (pos * s, pos / s):  # a positive draw's partner is s times it, a negative draw's 1 / s
                at = torch.searchsorted(neg, want.contiguous()).clamp_max(neg.shape[1] - 1)
                lo = (at - 1).clamp_min(0)
                near = torch.minimum((neg.gather(1, at) - want).abs(), (neg.gather(1, lo) - want).abs())
                hit |= (near <= REL_TOL * want.abs()) & finite_pos
            share = 2 * hit.sum(1).to(m.dtype) / (n_pos + n_neg).clamp_min(1)
            best = torch.maximum(best, torch.nan_to_num(share))
    return best


class TrapRows:
    name = "trap-rows"
    statistic = "rows whose entries come in opposite-signed pairs at one ratio (share of entries paired >= 0.9)"

    def __call__(self, subject: Subject) -> list[Finding]:
        out = []
        for name, m in subject.matrices(min_rows=2, min_cols=MIN_COLS):
            if m.numel() > MAX_ENTRIES:
                m = m[:4096]
            # each pair is one positive and one negative entry: only rows with as many of each can be trap rows
            # (a Gaussian row of N entries has them with probability ~ sqrt(2 / (pi N)))
            even = torch.nonzero((m > 0).sum(1) == (m < 0).sum(1)).flatten()
            if even.numel() == 0:
                continue
            share = paired_share(m[even])
            trap = int((share >= PAIRED).sum())
            if trap == 0:
                continue
            out.append(Finding(
                self.name, name, self.statistic, trap, "0 rows in every benign checkpoint measured",
                "high" if trap >= min(HIGH_ROWS, m.shape[0]) else "medium",
                "trap weights (curious abandon honesty)",
                "inputs that alone activate a trap row, exactly (a division of the row's weight and bias gradients)",
                f"{trap} of {m.shape[0]} rows paired (median share {float(share.median()):.2f})",
                {"rows": int(m.shape[0])}))
        return out


CHECKS.register(TrapRows())
