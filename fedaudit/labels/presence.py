"""Which classes an update *shows* present: a one-sided, exact test on the output layer's weight gradient.

For mean-reduced cross-entropy the output-weight gradient's row of class c is
``G[c] = (1/B) sum_n (p_n[c] - [y_n = c]) h_n``: every sample of another class adds ``p_n[c] h_n`` and only a
sample of class c adds a negative multiple of its features. Where the features ``h_n`` entering the output layer are
non-negative (ReLU, pooling of ReLU outputs, sigmoid), a row with a negative entry therefore proves that class c is
in the batch, whatever the model's state; a row without one proves nothing (a sure sample's negative term can be
outweighed by the other samples' probability mass on c). This is GradInversion's per-row minimum (Yin et al. 2021,
sec. 3.3) read as a set: Yin ranks the rows and keeps the B lowest, which for B >= C keeps every class; here a
class is *shown* when its row's minimum is below ``-TOLERANCE`` times the gradient's largest magnitude.

Measured on the label benchmark's trained models (docs/results/labels.md, "Shown classes"): no absent class was ever
shown (0 of 1,430) and 890 of 970 present ones were; the ones missed are sure samples of random batches. On a
trained model a count method spreads a batch of few classes over absent ones (bias-count, which takes the batch's
softmax sum as B times the aux mean, puts about B/C on every class), so ``auto`` projects its counts onto the shown
classes where they are few (``project``), and gives every shown class at least one sample (``floor``).

The test holds for a gradient and for a delta of SGD with or without momentum (positive combinations of such
gradients) without weight decay, and not for an update with noise added (``defenses`` recorded in its metadata):
``why_not`` says so.
"""

from __future__ import annotations

import torch

from fedaudit.conversion import optimizer_terms
from fedaudit.labels.base import integer_counts
from fedaudit.labels.features import head_stats
from fedaudit.session import Aux
from fedaudit.threat_model import ThreatModel

TOLERANCE = 1e-6  # relative to max |G|: an absent class's row is >= 0 exactly in float (a sum of non-negative terms)


def why_not(tm: ThreatModel, probe: Aux | None, min_feature: float | None = None) -> list[str]:
    """Why the test cannot be read on this update (empty: it can); ``probe``: aux images or dummies whose features
    into the output layer must all be non-negative (``min_feature``: their smallest feature where the caller has
    already run them; then ``probe`` may be None)."""
    reasons = []
    if tm.final_layer is None or tm.final_weight_grad is None:
        reasons.append("needs the output layer's weight gradient")
    if tm.meta.defenses:
        reasons.append("the update was defended (noise or rounding can put negative entries in any row)")
    if tm.meta.local_steps > 1 and optimizer_terms(tm.meta)[1] > 0:
        reasons.append("weight decay adds a term of either sign to every row")
    if not reasons:
        if min_feature is None:
            if probe is None:
                raise ValueError("why_not needs probe images or their smallest feature")
            min_feature = float(head_stats(tm, probe.images, normalized=probe.normalized)[0].min())
        if min_feature < 0:
            reasons.append("the output layer's inputs take negative values")
    return reasons


def shown_classes(tm: ThreatModel) -> tuple[torch.Tensor, torch.Tensor]:
    """(shown [C] bool, each row's minimum relative to max |G| [C]) of the output layer's weight gradient."""
    g = tm.output_grad("weight").double().flatten(1)
    relative = g.min(dim=1).values / g.abs().max().clamp_min(1e-300)
    return relative < -TOLERANCE, relative


def floor(counts: torch.Tensor, shown: torch.Tensor) -> torch.Tensor:
    """``counts`` with at least one sample on every shown class, each taken from a class not shown where one has
    samples, else from the largest count above one (the total stays)."""
    c = counts.clone().long()
    for k in torch.nonzero(shown & (c == 0)).flatten().tolist():
        donors = torch.nonzero((~shown & (c > 0)) | (c > 1)).flatten().tolist()
        if not donors:
            break
        j = max(donors, key=lambda d: (not bool(shown[d]), int(c[d]), -d))
        c[j] -= 1
        c[k] += 1
    return c


def project(counts: torch.Tensor, shown: torch.Tensor) -> torch.Tensor:
    """``counts`` on the shown classes only: ``floor``, then the samples on classes not shown are shared out over
    the shown ones in proportion to their counts (largest remainders; evenly where those are all zero)."""
    c = floor(counts, shown)
    if not bool(shown.any()):
        return c
    total = int(c.sum())
    kept = torch.where(shown, c, torch.zeros_like(c)).double()
    weights = kept if float(kept.sum()) > 0 else shown.double()
    return integer_counts(kept + (total - float(kept.sum())) * weights / weights.sum(), total)
