"""Read a checkpoint as a scan subject and run every check on it (``fedaudit scan``; docs/scan.md).

What is read: a fedaudit checkpoint (its tensors, its declared architecture, and where that architecture is
registered the model itself, for the architecture comparison and the probe batch); a plain safetensors state_dict
(tensors only); a Hugging Face language-model folder (its weights and config); a PEFT adapter folder (its base
model's folder, ``--base`` or the adapter's ``base_model_name_or_path``, and the adapter's own tensors). A custom
architecture (``module:factory``) is not imported unless allowed: its checks run on the tensors alone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from fedaudit.errors import InputError
from fedaudit.io.files import read_safetensors, sha256_file
from fedaudit.io.hf_folder import ADAPTER, CONFIG, WEIGHTS, is_text_checkpoint, read_config
from fedaudit.io.metadata import Meta
from fedaudit.models import build_model
from fedaudit.models.build import is_custom_arch
from fedaudit.models.registry import final_linear
from fedaudit.scan.finding import SEVERITIES, Finding, level
from fedaudit.scan.registry import CHECKS
from fedaudit.scan.subject import Subject


def _floating(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: (v if v.dtype in (torch.float32, torch.float64) else v.float()) for k, v in tensors.items()
            if v.is_floating_point()}


def image_subject(path: Path, allow_custom_arch: bool = False, probe: torch.Tensor | None = None,
                  probe_source: str = "", aux: Path | None = None) -> Subject:
    from fedaudit.data.public import public_images
    from fedaudit.io.checkpoint import load_state_strict, read_spec, state_differences

    tensors, raw = read_safetensors(path, "checkpoint")
    source = f"checkpoint {str(path)!r}"
    if not any(k.startswith("fedaudit.") for k in raw):
        return Subject(str(path), "state_dict", _floating(tensors), notes=[
            "no fedaudit metadata (a plain state_dict): the tensors are read, the architecture comparison and the "
            "probe batch are not (import it with 'fedaudit import checkpoint' to have them)"])
    meta = Meta(raw, source)
    if meta.str("file") == "update":
        raise InputError(f"{source} is a recorded update, not a checkpoint: scan reads the model a server sends")
    spec = read_spec(meta)
    subject = Subject(str(path), "image", _floating(tensors), declared=spec.arch, input_shape=spec.input_shape,
                      num_classes=spec.num_classes)
    if is_custom_arch(spec.arch) and not allow_custom_arch:
        subject.notes.append(f"custom architecture {spec.arch!r}: its code is not run (--allow-custom-arch builds it); "
                             "the tensors are read, the architecture comparison and the probe are not")
        return subject
    model = build_model(spec, allow_custom=allow_custom_arch)
    diff = state_differences(model.state_dict(), tensors)
    subject.against_declared = diff
    if any(diff.values()):  # not built: the declared-architecture check reports the difference
        return subject
    load_state_strict(model, tensors, source)
    model.eval()
    subject.model = model
    head = final_linear(model)
    subject.classifier = f"{head}.weight" if head else None
    if probe is None and aux is not None:  # the reviewer's own probe images (a folder, a file, builtin:NAME)
        from fedaudit.session import AuxSource

        loaded = AuxSource(aux, resize=True).load(spec, 0)
        probe, probe_source = (loaded.images, str(aux)) if loaded is not None else (None, "")
    if probe is None:
        probe, probe_source = public_images(spec.input_shape)
    if probe is None:
        subject.notes.append(f"no probe batch: {probe_source}")
    else:
        subject.probe, subject.probe_source = probe, probe_source
    return subject


def text_subject(path: Path, base: Path | None = None) -> Subject:
    """A language-model folder (or an adapter's base folder, with the adapter's tensors named ``adapter:...``)."""
    adapter: dict[str, torch.Tensor] = {}
    folder = path
    if not (path / CONFIG).is_file() and (path / ADAPTER).is_file():
        from fedaudit.io.text_adapter import ADAPTER_WEIGHTS, base_folder

        folder = base_folder(path, read_config(path / ADAPTER), base)  # found, or refused, as every text command does
        if (path / ADAPTER_WEIGHTS).is_file():
            adapter = {f"adapter:{k}": v for k, v in read_safetensors(path / ADAPTER_WEIGHTS, "adapter weights")[0].items()}
    config = read_config(folder / CONFIG)
    tensors, _ = read_safetensors(folder / WEIGHTS, "language-model weights")
    subject = Subject(str(path), "text", _floating({**tensors, **adapter}), declared=str(config.get("model_type")))
    try:
        from fedaudit.io.text_checkpoint import load_text_checkpoint

        subject.model = load_text_checkpoint(folder).model
    except InputError as exc:
        subject.against_declared = {"unexpected": [f"(not loadable as its config declares: {exc})"]}
    return subject


def load_subject(path: str | Path, allow_custom_arch: bool = False, base: Path | None = None,
                 probe: torch.Tensor | None = None, probe_source: str = "", aux: Path | None = None) -> Subject:
    p = Path(path)
    if is_text_checkpoint(p):
        if aux is not None:
            raise InputError("--aux is for image checkpoints (the D-SNR probe)")
        return text_subject(p, base)
    if base is not None:
        raise InputError("--base is for a PEFT adapter folder")
    return image_subject(p, allow_custom_arch, probe, probe_source, aux)


def verdict(findings: list[dict[str, Any]]) -> dict[str, Any]:
    """The findings (JSON) worst first, and the scan's verdict on them: the highest severity found, and counts."""
    findings = sorted(findings, key=lambda f: -level(f["severity"]))
    worst = max((f["severity"] for f in findings), key=level, default=None)
    return {"severity": worst or "none", "built_to_leak": worst == "high", "findings": findings,
            "counts": {s: sum(f["severity"] == s for f in findings) for s in SEVERITIES}}


def scan(subject: Subject) -> dict[str, Any]:
    """Every check's findings and the scan's verdict."""
    findings: list[Finding] = []
    seconds = {}
    for name, check in CHECKS:
        t0 = time.perf_counter()
        findings += check(subject)
        seconds[name] = round(time.perf_counter() - t0, 3)
    return {**verdict([f.to_json() for f in findings]), "checks": list(seconds), "seconds": seconds,
            "declared": subject.declared, "kind": subject.kind, "model_built": subject.model is not None,
            "probe": subject.probe_source or None, "measured": subject.measured, "notes": subject.notes,
            "tensors": len(subject.tensors)}


def is_round_folder(p: Path) -> bool:
    """A round folder: the global checkpoint beside ``clients/`` (fedaudit/scan/round.py)."""
    return p.is_dir() and (p / "checkpoint.safetensors").is_file() and (p / "clients").is_dir()


def scan_path(path: str | Path, allow_custom_arch: bool = False, base: Path | None = None,
              probe: torch.Tensor | None = None, probe_source: str = "", probe_size: int | None = None,
              aux: Path | None = None) -> dict[str, Any]:
    p = Path(path)
    round_dir = p if is_round_folder(p) else None
    if round_dir is not None:  # a round: its global model, then whether every client got it
        p = p / "checkpoint.safetensors"
    subject = load_subject(p, allow_custom_arch, base, probe, probe_source, aux)
    subject.probe_size = probe_size
    out = scan(subject)
    if round_dir is not None:
        from fedaudit.scan.round import round_findings

        found, read = round_findings(round_dir)
        out = {**out, **verdict([*out["findings"], *(f.to_json() for f in found)])}
        out["round"] = {"path": str(round_dir), **read}
        if read.get("note"):
            out["notes"].append(read["note"])
    else:
        out["round"] = None
    weights = p / WEIGHTS if p.is_dir() else p  # a folder's weights file (an adapter folder has none of its own)
    return {"checkpoint": {"path": str(p), "sha256": sha256_file(weights) if weights.is_file() else None}, **out}
