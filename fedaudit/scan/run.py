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


def _compare(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> dict[str, list[str]]:
    expected = model.state_dict()
    return {"unexpected": [k for k in tensors if k not in expected],
            "missing": [k for k in expected if k not in tensors],
            "misshapen": [k for k, v in expected.items() if k in tensors and tuple(tensors[k].shape) != tuple(v.shape)]}


def image_subject(path: Path, allow_custom_arch: bool = False, probe: torch.Tensor | None = None,
                  probe_source: str = "", aux: Path | None = None) -> Subject:
    from fedaudit.data.public import public_images
    from fedaudit.io.checkpoint import load_state_strict, read_spec

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
        subject.not_built = (f"custom architecture {spec.arch!r}: its code is not run (--allow-custom-arch builds it); "
                             "the tensors are read, the architecture comparison and the probe are not")
        subject.notes.append(subject.not_built)
        return subject
    model = build_model(spec, allow_custom=allow_custom_arch)
    diff = _compare(model, tensors)
    subject.against_declared = diff
    if any(diff.values()):
        subject.not_built = "the file does not fit its declared architecture (the declared-architecture finding)"
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
        config = read_config(path / ADAPTER)
        named = config.get("base_model_name_or_path")
        found = base or (Path(named) if isinstance(named, str) and Path(named).is_dir() else None)
        if found is None:
            from fedaudit.io.text_checkpoint import refuse_adapter_without_base

            refuse_adapter_without_base(path)  # raises: an adapter alone is not a model
        folder = found or path
        weights = sorted(path.glob("adapter_model.safetensors"))
        if weights:
            adapter = {f"adapter:{k}": v for k, v in read_safetensors(weights[0], "adapter weights")[0].items()}
    config = read_config(folder / CONFIG)
    tensors, _ = read_safetensors(folder / WEIGHTS, "language-model weights")
    subject = Subject(str(path), "text", _floating({**tensors, **adapter}), declared=str(config.get("model_type")))
    try:
        from fedaudit.io.text_checkpoint import load_text_checkpoint

        subject.model = load_text_checkpoint(folder).model
    except InputError as exc:
        subject.not_built = str(exc)
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


def scan(subject: Subject, checks: list[str] | None = None) -> dict[str, Any]:
    """Every check's findings and the scan's verdict: the highest severity found."""
    findings: list[Finding] = []
    ran, seconds = [], {}
    for name, check in CHECKS:
        if checks is not None and name not in checks:
            continue
        t0 = time.perf_counter()
        findings += check(subject)
        seconds[name] = round(time.perf_counter() - t0, 3)
        ran.append(name)
    findings.sort(key=lambda f: -level(f.severity))
    worst = max((f.severity for f in findings), key=level, default=None)
    return {"severity": worst or "none", "built_to_leak": worst == "high",
            "findings": [f.to_json() for f in findings], "counts": {s: sum(f.severity == s for f in findings)
                                                                    for s in SEVERITIES},
            "checks": ran, "seconds": seconds, "declared": subject.declared, "kind": subject.kind,
            "model_built": subject.model is not None, "probe": subject.probe_source or None,
            "measured": subject.measured, "notes": subject.notes, "tensors": len(subject.tensors)}


def is_round_folder(p: Path) -> bool:
    """A round folder: the global checkpoint beside ``clients/`` (fedaudit/scan/round.py)."""
    return p.is_dir() and (p / "checkpoint.safetensors").is_file() and (p / "clients").is_dir()


def merge(out: dict[str, Any], more: list[Finding]) -> dict[str, Any]:
    """A scan's document with ``more`` findings added (its severity and counts read again)."""
    findings = sorted([*out["findings"], *(f.to_json() for f in more)], key=lambda f: -level(f["severity"]))
    worst = max((f["severity"] for f in findings), key=level, default=None)
    return {**out, "findings": findings, "severity": worst or "none", "built_to_leak": worst == "high",
            "counts": {s: sum(f["severity"] == s for f in findings) for s in SEVERITIES}}


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
        out = merge(out, found)
        out["round"] = {"path": str(round_dir), **read}
        if read.get("note"):
            out["notes"].append(read["note"])
    else:
        out["round"] = None
    sha = sha256_file(p / WEIGHTS if p.is_dir() and (p / WEIGHTS).is_file() else p) if p.is_file() or \
        (p / WEIGHTS).is_file() else None
    return {"checkpoint": {"path": str(p), "sha256": sha}, **out}
