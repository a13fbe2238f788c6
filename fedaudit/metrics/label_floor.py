"""The uniform-count floor: how a guess that ignores the update scores against the true labels.

InsAcc rewards overlap, and the classes of a random batch are close to even, so spreading the samples evenly over
the classes already scores well without reading anything: 57% InsAcc on a batch of 8 labels drawn evenly from 10
classes, 85% on 64 and 93% on 320 (the B x K samples of a 10-step FedAvg client of batch 32); on a one-class batch
it scores 10%. A recovered count vector that does not clear this floor shows nothing about the batch, however high its
number; the label output states the floor beside InsAcc so a reviewer can tell the two apart
(docs/methods/labels.md, "Label metrics").

The guess gives each class ``N // C`` samples and the ``N mod C`` left over to classes drawn at random; the floor is
the exact expectation over that draw, so it depends on the true counts alone.
"""

from __future__ import annotations

import torch

METHOD = ("expected InsAcc/ClsAcc of the N samples spread evenly over the C classes (N // C each, the N mod C left "
          "over on classes drawn uniformly at random); needs no update")


def uniform_floor(true_counts: torch.Tensor) -> dict[str, float | str]:
    """Expected InsAcc and ClsAcc of the even spread of ``true_counts.sum()`` samples over its classes."""
    t = true_counts.long().cpu().flatten()
    n, c = int(t.sum()), int(t.numel())
    if n <= 0 or c <= 0:
        raise ValueError("the true counts hold no samples")
    q, r = divmod(n, c)
    # a class gets q, or q + 1 with probability r / c; the extra sample overlaps where the class has more than q
    overlap = float(torch.minimum(t, torch.tensor(q, device=t.device)).sum()) + r / c * float((t > q).sum())
    # with q >= 1 every class is guessed present; with q = 0 only the r drawn ones, each present class hit w.p. r / c
    cls = 1.0 if q >= 1 else r / c
    return {"InsAcc": overlap / n, "ClsAcc": cls, "method": METHOD}
