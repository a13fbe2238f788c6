"""The recorded-update file: tensors keyed by ``state_dict`` names, metadata under ``fedaudit.*``.

See docs/formats.md. Absent tensors mean "not shared" (restricted sharing); extra tensors are an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors, sha256_file, write_safetensors
from fedaudit.io.metadata import SCHEMA_VERSION, Meta, encode

KINDS = ("gradient", "delta", "weights")
DELTA_SIGNS = ("local_minus_global", "global_minus_local")
REDUCTIONS = ("mean", "sum")
BN_MODES = ("train", "eval")


# Above these a recorded batch or step count is corrupt, not a client's: the labels of B x K samples are
# materialised, so 1e9 (found by the fuzzer) ran for an hour instead of failing
MAX_BATCH, MAX_STEPS = 65_536, 100_000


@dataclass
class UpdateMeta:
    """What the client reported (or the capture recorded) about how the update was produced."""

    kind: str
    delta_sign: str | None = None
    reduction: str | None = None
    batch_size: int | None = None
    local_steps: int = 1
    local_lr: float | None = None
    num_examples: int | None = None
    bn_mode: str | None = None
    bn_momentum: float | str | None = None  # BatchNorm momentum of local training, or "cumulative" (momentum=None)
    base_checkpoint_sha256: str | None = None
    optimizer: dict[str, Any] = field(default_factory=lambda: {"name": "sgd", "momentum": 0.0, "weight_decay": 0.0})
    defenses: list[Any] = field(default_factory=list)
    source: Any = None

    def to_metadata(self) -> dict[str, str]:
        return encode({"schema_version": SCHEMA_VERSION, "file": "update", **self.__dict__, "defenses": self.defenses})

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def read_update_meta(meta: Meta) -> UpdateMeta:
    version = meta.str("schema_version", default=SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise InputError(f"{meta.source}: schema version {version!r} is not supported (this fedaudit reads {SCHEMA_VERSION})")
    if meta.str("file") == "checkpoint":
        raise InputError(f"{meta.source} is a checkpoint, not a recorded update (arguments swapped?)")
    kind = meta.choice("kind", KINDS, required=True)
    multi = kind != "gradient"
    out = UpdateMeta(
        kind=kind,
        delta_sign=meta.choice("delta_sign", DELTA_SIGNS, required=kind == "delta"),
        reduction=meta.choice("reduction", REDUCTIONS, required=kind == "gradient"),
        batch_size=meta.int("batch_size", minimum=1, maximum=MAX_BATCH),
        local_steps=meta.int("local_steps", default=1, required=multi, minimum=1, maximum=MAX_STEPS),
        local_lr=meta.float("local_lr", required=multi, positive=True),
        num_examples=meta.int("num_examples", minimum=1),
        bn_mode=meta.choice("bn_mode", BN_MODES),
        bn_momentum=_bn_momentum(meta),
        base_checkpoint_sha256=meta.str("base_checkpoint_sha256"),
        optimizer=meta.json("optimizer", default={"name": "sgd", "momentum": 0.0, "weight_decay": 0.0}, kind=dict),
        defenses=meta.json("defenses", default=[], kind=list),
        source=_source(meta),
    )
    _check_optimizer(out.optimizer, meta.source)
    if kind == "gradient" and out.local_steps != 1:
        raise InputError(f"{meta.source}: a kind=gradient update is one step; fedaudit.local_steps is {out.local_steps}")
    return out


def _check_optimizer(opt: dict[str, Any], source: str) -> None:
    """``fedaudit.optimizer``'s momentum in [0, 1) and weight decay finite and >= 0 when given (the gradient conversion,
    fedaudit/conversion.py, refuses other optimisers by name)."""
    for key, ok, rule in (("momentum", lambda v: 0 <= v < 1, "in [0, 1)"),
                          ("weight_decay", lambda v: 0 <= v < math.inf, "finite and >= 0")):
        value = opt.get(key, 0.0)
        try:
            number = float(value or 0.0)
        except (TypeError, ValueError):
            raise InputError(f"{source}: metadata fedaudit.optimizer {key} is {value!r}, not a number") from None
        if not ok(number):  # NaN fails every rule
            raise InputError(f"{source}: metadata fedaudit.optimizer {key} is {number}; must be {rule}")


def _bn_momentum(meta: Meta) -> float | str | None:
    """``fedaudit.bn_momentum``: PyTorch's BatchNorm momentum m in (0, 1], or "cumulative" (momentum=None)."""
    if meta.str("bn_momentum") == "cumulative":
        return "cumulative"
    m = meta.float("bn_momentum")
    if m is not None and not 0 < m <= 1:
        raise InputError(f"{meta.source}: metadata fedaudit.bn_momentum is {m}; must be in (0, 1] or 'cumulative'")
    return m


def _source(meta: Meta):
    """Provenance: a JSON object (framework, round, client...) or free text."""
    text = meta.str("source")
    return meta.json("source", kind=dict) if text and text.startswith("{") else text


@dataclass
class RecordedUpdate:
    path: Path
    sha256: str
    tensors: dict[str, torch.Tensor]
    meta: UpdateMeta
    raw_metadata: dict[str, str]


HUGE = 1e18  # |entry| above which squares overflow float32 (3.4e38)


def check_update_tensors(tensors: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], src: str, what: str,
                         hint: str = "", allow_nonfinite: bool = False) -> list[str]:
    """Refuse an upload's tensor that is not one of ``reference``'s (``what`` names them in the message), has another
    shape, or holds integers where the model holds floats; refuse NaN/Inf and entries too large to compute with
    unless ``allow_nonfinite``. ``hint`` ends the name and shape lines. Returns the tensors holding NaN/Inf."""
    for k, v in tensors.items():
        ref = reference.get(k)
        if ref is None:
            raise InputError(f"{src}: tensor {k!r} is not {what}{hint}")
        if tuple(v.shape) != tuple(ref.shape):
            raise InputError(f"{src}: tensor {k!r} has shape {list(v.shape)}, the model expects {list(ref.shape)}{hint}")
        if ref.is_floating_point() and not v.is_floating_point():
            # an integer upload (e.g. int32) would be read as a gradient of whole numbers: refuse it
            raise InputError(f"{src}: tensor {k!r} has dtype {str(v.dtype).replace('torch.', '')}; "
                             "a parameter's update must be floating point (float16, bfloat16, float32 or float64)")
    nonfinite = [k for k, v in tensors.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if nonfinite and not allow_nonfinite:
        raise InputError(f"{src}: tensor {nonfinite[0]!r} contains NaN or Inf"
                         + (f" (+{len(nonfinite) - 1} more)" if len(nonfinite) > 1 else ""))
    # entries so large that their squares overflow float32: no gradient of a finite loss, and every distance
    # computed on them would be Inf
    huge = [k for k, v in tensors.items() if k not in nonfinite and v.is_floating_point() and v.numel()
            and float(v.abs().max()) > HUGE]
    if huge and not allow_nonfinite:
        raise InputError(f"{src}: tensor {huge[0]!r} has entries above {HUGE:.0e} in magnitude (a diverged or "
                         "corrupt update); fedaudit cannot compute with it")
    return nonfinite


def load_update(path: str | Path) -> RecordedUpdate:
    tensors, raw = read_safetensors(path, "update")
    if tensors and not any(k.startswith("fedaudit.") for k in raw):  # a plain save: say how to bring it in
        raise InputError(f"update {str(path)!r} has no fedaudit metadata (a plain save of gradients or a weight "
                         f"change?): import it with 'fedaudit import update {str(path)} -c CHECKPOINT -o "
                         "update.safetensors --kind gradient|delta -b B [-k K --lr LR]' (docs/usage.md)")
    meta = read_update_meta(Meta(raw, f"update {str(path)!r}"))
    if not tensors:
        raise InputError(f"update {str(path)!r} holds no tensors")
    return RecordedUpdate(Path(path), sha256_file(path), tensors, meta, raw)


def save_update(path: str | Path, tensors: dict[str, torch.Tensor], meta: UpdateMeta) -> Path:
    """Write an update whose metadata fedaudit itself will read back: it is parsed by the reader's own rules
    (``read_update_meta``) before anything is written, so
    a NaN learning rate or a momentum of 1.5 is refused here, not by the next command that opens the file."""
    metadata = meta.to_metadata()
    read_update_meta(Meta(metadata, f"update {str(path)!r} (not written)"))
    return write_safetensors(path, tensors, metadata)
