"""SEER's D-SNR (Garov et al., ICLR 2024): on a public probe batch, per weight layer, the largest per-sample gradient
norm over the sum of the others; the model's D-SNR is the largest over layers. An attack that makes one sample's
gradient dominate the aggregate (fishing, a class or feature attack) shows it; SEER reports fishing at multipliers
16..12 at 79, 33, 20, 8.7, 0.77 and its own disguised model near 0.65. The probe is the builtin public images of the
model's input shape, 16 of them up to 64 x 64 pixels and 8 above (``--probe N``: another count, 0 skips the check),
labels cycled over the classes, the model in train mode as a client runs it."""

from __future__ import annotations

import torch

from fedaudit.scan.finding import Finding
from fedaudit.scan.registry import CHECKS
from fedaudit.scan.subject import Subject

PROBE = 16          # images at inputs up to 64 x 64 (SEER's smallest batch)
PROBE_LARGE = 8     # above: each image costs a backward pass (ResNet-18 at 224 px: ~0.7 s each on 2 cores)
# benign checkpoints reach 0.50 (EfficientNet-B0 and MobileNetV3 at random init, B = 16; docs/results/scan.md), so
# SEER's disguised models (~0.65) are inside the benign range: D-SNR flags one sample at twice (medium) and four times
# (high) that reach
MEDIUM = 1.0
HIGH = 2.0


def d_snr(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> tuple[float, str]:
    """(D-SNR, the layer that sets it) of ``model`` on one batch, per-sample gradients by one backward each."""
    weights = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p.ndim >= 2]
    was = model.training
    model.train()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # dropout, if any, draws the same masks on every scan
            logits = model(images)
            if not isinstance(logits, torch.Tensor):  # GoogLeNet/Inception in train mode: (logits, aux logits)
                logits = logits.logits if hasattr(logits, "logits") else logits[0]
            losses = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
        norms = torch.zeros(len(weights), len(images), dtype=torch.float64)
        for i in range(len(images)):
            grads = torch.autograd.grad(losses[i], [p for _, p in weights], retain_graph=i + 1 < len(images),
                                        allow_unused=True)
            for j, g in enumerate(grads):
                norms[j, i] = 0.0 if g is None else float(g.double().norm())
    finally:
        model.train(was)
    top = norms.amax(1)
    snr = top / (norms.sum(1) - top).clamp_min(1e-30)
    k = int(snr.argmax())
    return float(snr[k]), weights[k][0]


class DisaggregationSNR:
    name = "d-snr"
    statistic = "D-SNR: per layer, the largest per-sample gradient norm over the sum of the others (probe batch)"

    def __call__(self, subject: Subject) -> list[Finding]:
        if subject.model is None or subject.probe is None or subject.num_classes is None:
            return []
        side = max(subject.input_shape[1:]) if subject.input_shape else 0
        n = subject.probe_size if subject.probe_size is not None else PROBE if side <= 64 else PROBE_LARGE
        images = subject.probe[:n]
        if len(images) < 2:
            return []
        labels = torch.arange(len(images)) % subject.num_classes
        try:
            value, layer = d_snr(subject.model, images, labels)
        except (RuntimeError, TypeError, ValueError, IndexError) as exc:  # a model the probe cannot run: say so
            subject.notes.append(f"D-SNR not measured: the probe batch did not run through the model ({exc})")
            return []
        subject.measured["d_snr"] = {"value": value, "layer": layer, "probe": len(images)}
        if value < MEDIUM:
            return []
        return [Finding(self.name, layer, self.statistic, value, f"below {MEDIUM:g} on benign checkpoints "
                        f"(B = {len(images)} probe images)", "high" if value >= HIGH else "medium",
                        "an attack that isolates one sample's gradient (fishing, class or feature attack; SEER-like "
                        "disaggregation)", "one sample's input out of the aggregate update",
                        f"on {len(images)} probe images ({subject.probe_source})")]


CHECKS.register(DisaggregationSNR())
