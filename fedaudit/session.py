"""What one run is given besides the threat model: seed, device, batch-size override, auxiliary data, and the
input/output policies. A Session is built once per command (CLI, audit, benchmark, test) and handed down; label
methods, attacks and defenses read the seed, device and aux data from it and keep no copies of their own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fedaudit.data.public import builtin
from fedaudit.device import resolve_device
from fedaudit.errors import InputError
from fedaudit.io.images import load_images, parse_labels
from fedaudit.models import ModelSpec
from fedaudit.threat_model import ThreatModel, load_threat_model


@dataclass
class Aux:
    """Auxiliary inputs the server holds (public images, or Gaussian dummies); labels when known."""

    images: torch.Tensor  # [N, C, H, W] in [0,1] (dummies: N(0,1) in normalised space, already normalised)
    labels: torch.Tensor | None
    kind: str  # "images" | "dummy"
    normalized: bool = False  # dummies are drawn directly in the network's input space

    @classmethod
    def dummies(cls, spec: ModelSpec, n: int, seed: int) -> Aux:
        """N(0,1) inputs in the network's (normalised) input space, labelled round-robin by class."""
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, *spec.input_shape, generator=g, device="cpu")  # on the host, as aux images are
        return cls(x, torch.arange(n, device="cpu") % spec.num_classes, "dummy", normalized=True)

    def describe(self) -> dict:
        return {"kind": self.kind, "count": int(self.images.shape[0]), "labelled": self.labels is not None}


@dataclass(frozen=True)
class AuxSource:
    """Where the aux data comes from (``--aux/--aux-labels/--resize`` or ``--dummy/--num-dummy``); it becomes an
    :class:`Aux` once the model's input shape is known."""

    path: Path | None = None
    labels: str | None = None
    dummy: bool = False
    num_dummy: int = 1000
    resize: bool = False

    def load(self, spec: ModelSpec, seed: int) -> Aux | None:
        if self.path is not None and self.dummy:
            raise InputError("give either --aux or --dummy, not both")
        if self.dummy:
            return Aux.dummies(spec, self.num_dummy, seed)
        if self.path is None:
            return None
        if str(self.path).startswith("builtin:"):  # an offline public set, resized to the model's input
            images, labels = builtin(str(self.path).split(":", 1)[1], tuple(spec.input_shape))
            fits = bool(labels.max() < spec.num_classes)  # CIFAR-100's or ImageNet's classes for a 10-class model: none
            return Aux(images, labels if fits and not self.labels else None, "images")
        batch = load_images(self.path, spec.input_shape, resize=self.resize)
        y = parse_labels(self.labels, batch, spec.num_classes) if (self.labels or batch.labels is not None) else None
        return Aux(batch.images, y, "images")


@dataclass
class Session:
    seed: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    batch_size: int | None = None  # --batch-size: applied once, when the threat model is loaded
    # what --batch-size does to an update that records another batch size: "check" refuses (the default),
    # "override" replaces it (--force), "fill" applies it only to updates that record none (audit-round)
    batch_size_mode: str = "check"
    aux: Aux | None = None
    quiet: bool = True  # no progress or tables on stderr
    progress: str = "auto"  # how a long run shows progress: auto | bar | lines | off (fedaudit/progress.py)
    force: bool = False  # outputs may replace existing files
    allow_custom_arch: bool = False
    check_base: bool = True  # the update must name this checkpoint's hash (when it names one)
    lpips_net: str = "vgg"
    lpips_weights: str | None = None

    @classmethod
    def create(cls, device: str | torch.device = "cpu", **fields) -> Session:
        """A session with ``device`` resolved (``auto``, ``cpu``, ``cuda``, ``cuda:N``) once, here."""
        dev = device if isinstance(device, torch.device) else resolve_device(device)
        return cls(device=dev, **fields)

    def replace(self, **changes) -> Session:
        return dataclasses.replace(self, **changes)

    def load_threat_model(self, checkpoint: str | Path, update: str | Path, aux: AuxSource | None = None,
                          allow_nonfinite: bool = False) -> ThreatModel:
        """Load a checkpoint and an update under this session's policies, with its batch-size override, the
        model on its device, and its aux data (from ``aux``) drawn or loaded for this model."""
        torch.manual_seed(self.seed)
        tm = load_threat_model(checkpoint, update, batch_size=self.batch_size, batch_size_mode=self.batch_size_mode,
                               allow_custom_arch=self.allow_custom_arch,
                               allow_nonfinite=allow_nonfinite, check_base=self.check_base)
        tm.model.to(self.device)
        if aux is not None:
            self.aux = aux.load(tm.spec, self.seed)
        return tm
