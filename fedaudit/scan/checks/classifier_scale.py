"""Fishing (Wen et al., ICML 2022; breaching's class attack): the output layer rewritten so that one class, or one
feature of one class, dominates the aggregate gradient: the other classes' rows zeroed and their biases pushed to
+1000, or the whole layer multiplied (breaching's ``feat_multiplier``, 300 by default). Read on the output layer: rows
that are all zero, one row's norm far beyond the median row's, biases far beyond the weights' scale, and the layer's
gain (its gain over the median gain of the model's other layers)."""

from __future__ import annotations

import math

from fedaudit.scan.finding import Finding
from fedaudit.scan.registry import CHECKS
from fedaudit.scan.subject import Subject

ROW_RATIO = 10.0   # largest row norm over the median row's
BIAS_LIMIT = 50.0  # largest |bias| over (median row norm x sqrt(fan-in)), the logit scale a unit feature gives
# the output layer's gain over the median of the model's other layers: benign 0.15 (RegNet) to 11.4 (EfficientNet-B0,
# whose head is drawn from U(+-1/sqrt(classes))) on the benign set, docs/results/scan.md; about twice the largest. A
# whole head multiplied by 12-16 (fishing's multiplier on a ResNet-18: 4.9-6.6) stays inside that range: not
# separable by this statistic (the class and feature attacks are: their zeroed rows)
GAIN_LIMIT = 25.0


def gain(w) -> float:
    """RMS weight x sqrt(fan-in): the scale a layer gives unit-variance inputs (1/sqrt(3) at PyTorch's default init)."""
    m = w.reshape(w.shape[0], -1).double()
    return float(m.pow(2).mean().sqrt()) * math.sqrt(m.shape[1])


def output_layer(subject: Subject) -> str | None:
    if subject.classifier and subject.classifier in subject.tensors:
        return subject.classifier
    if subject.kind == "text" or subject.num_classes is None:
        return None
    rows = [n for n, w in subject.tensors.items() if w.ndim == 2 and n.endswith("weight") and w.shape[0] == subject.num_classes]
    return rows[-1] if rows else None


class ClassifierScale:
    name = "classifier-scale"
    statistic = "the output layer's zeroed rows, row-norm ratio, bias scale and gain"

    def __call__(self, subject: Subject) -> list[Finding]:
        name = output_layer(subject)
        if name is None:
            return []
        w = subject.tensors[name].double()
        b = subject.tensors.get(name[: -len("weight")] + "bias")
        norms = w.norm(dim=1)
        med = float(norms.median())
        fan = math.sqrt(w.shape[1])
        what = "fishing (Wen et al.; breaching's class attack)"
        rec = "one image of the target class (or with the targeted feature value) out of the aggregate, at any batch size"
        out: list[Finding] = []
        zero = int((norms == 0).sum())
        if zero == w.shape[0]:  # a zero-initialised head (torchvision's ViTs): nothing dominates, nothing to read
            subject.notes.append(f"{name} is all zero (a zero-initialised head): the classifier checks do not apply")
            return out
        if zero:
            out.append(Finding(self.name, name, "output rows that are all zero beside non-zero ones", zero,
                               "0 in every benign checkpoint (a head that is all zero is a zero initialisation)",
                               "high" if zero >= max(1, w.shape[0] // 2) else "medium", what, rec,
                               f"{zero} of {w.shape[0]} classes can never be predicted"))
        ratio = float(norms.max()) / med if med > 0 else math.inf
        if ratio > ROW_RATIO:
            out.append(Finding(self.name, name, "largest output row norm / median row norm", ratio,
                               f"below {ROW_RATIO:g} in benign checkpoints", "high", what, rec,
                               f"row {int(norms.argmax())} dominates"))
        scale = med * fan
        if b is not None and b.numel() == w.shape[0]:
            big = float(b.abs().max())
            rel = big / scale if scale > 0 else math.inf
            if rel > BIAS_LIMIT:
                out.append(Finding(self.name, name[: -len("weight")] + "bias", "largest |bias| / (median row norm x "
                                   "sqrt(fan-in))", rel, f"below {BIAS_LIMIT:g} in benign checkpoints", "high", what,
                                   rec, f"|bias| up to {big:.3g}"))
        others = [gain(t) for n, t in subject.tensors.items()
                  if t.ndim >= 2 and n.endswith("weight") and n != name and "embed" not in n and t.shape[0] > 1]
        if others:
            rel = gain(w) / max(sorted(others)[len(others) // 2], 1e-30)
            subject.measured["output_gain_ratio"] = rel
            if rel > GAIN_LIMIT:
                out.append(Finding(self.name, name, "output layer gain / median gain of the other layers", rel,
                                   f"below {GAIN_LIMIT:g} in benign checkpoints", "high", what + ", the layer multiplied",
                                   rec))
        return out


CHECKS.register(ClassifierScale())
