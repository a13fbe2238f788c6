"""The checkpoint against its declaration: tensors the declared architecture does not have (an inserted imprint
block, an extra layer), tensors it lacks, or shapes it does not take. A server that ships a model built to leak has
to ship its extra modules; a client that builds the declared architecture would refuse the file, one that loads it
loosely would train on it."""

from __future__ import annotations

from fedaudit.scan.finding import Finding
from fedaudit.scan.registry import CHECKS
from fedaudit.scan.subject import Subject


class DeclaredArch:
    name = "declared-architecture"
    statistic = "tensors outside the declared architecture (extra, missing, misshapen)"

    def __call__(self, subject: Subject) -> list[Finding]:
        diff = subject.against_declared
        if not diff:
            return []
        extra, missing, shapes = diff.get("unexpected", []), diff.get("missing", []), diff.get("misshapen", [])
        n = len(extra) + len(missing) + len(shapes)
        if not n:
            return []
        parts = [f"{len(v)} {k}: {', '.join(v[:4])}{' ...' if len(v) > 4 else ''}"
                 for k, v in (("extra", extra), ("missing", missing), ("misshapen", shapes)) if v]
        return [Finding(self.name, (extra or missing or shapes)[0], self.statistic, n,
                        "0: a benign checkpoint is its declared architecture", "high" if extra or shapes else "medium",
                        "a modified architecture (an inserted block: imprint, trap weights; a replaced layer)",
                        "whatever the inserted block was built to recover; its tensors are listed",
                        f"declared {subject.declared!r}; " + "; ".join(parts), {k: v for k, v in diff.items() if v})]


CHECKS.register(DeclaredArch())
