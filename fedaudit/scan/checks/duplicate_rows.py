"""Rows of a layer that are equal or scaled copies of one another: an imprint block (Robbing the Fed: every row the
same query direction) or a malicious transformer's first linear layer (Decepticons). Trained and randomly initialised
layers have none (docs/results/scan.md)."""

from __future__ import annotations

from fedaudit.scan.finding import Finding
from fedaudit.scan.registry import CHECKS
from fedaudit.scan.rows import nonzero_rows
from fedaudit.scan.subject import Subject

HIGH_SHARE = 0.25  # a quarter of a layer's rows copies of one another: an imprint's bins, not chance
HIGH_ROWS = 2  # the one-shot block has two bins


class DuplicateRows:
    name = "duplicate-rows"
    statistic = "rows that are scaled copies of another row (|cos| >= 1 - 1e-6), of the layer's non-zero rows"

    def __call__(self, subject: Subject) -> list[Finding]:
        out = []
        for name, m in subject.matrices(min_rows=2):
            groups = subject.copies(name, m)
            if not groups:
                continue
            copies = sum(len(g) for g in groups)
            n = int(nonzero_rows(m).numel())
            share = copies / n
            high = copies >= HIGH_ROWS and share >= HIGH_SHARE
            out.append(Finding(
                self.name, name, self.statistic, round(share, 4), "0 rows in every benign checkpoint measured",
                "high" if high else "medium",
                "an imprint block (Robbing the Fed) or a malicious transformer layer (Decepticons)",
                "each input that falls alone between two bins' thresholds, exactly (a division of two rows' gradients),"
                " for batches of hundreds",
                f"{copies} of {n} rows in {len(groups)} group(s) of copies; largest group {max(map(len, groups))}",
                {"copies": copies, "rows": n, "groups": [g[:16] for g in groups[:8]]}))
        return out


CHECKS.register(DuplicateRows())
