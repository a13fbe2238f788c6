"""Safe file primitives: safetensors read with clear errors, atomic writes, hashing."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as st_save

from fedaudit.errors import InputError

PICKLE_SUFFIXES = {".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt"}


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def path_component(text: str) -> str:
    """``text`` as one safe file-name component: characters outside [A-Za-z0-9_.=-] become '_', and a leading dot
    does too, so no name becomes '.', '..' or a hidden file, and none holds a separator."""
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", text) or "_"
    return "_" + name[1:] if name.startswith(".") else name


def check_readable(path: str | Path, what: str) -> Path:
    """``path`` as a Path when it is a readable regular file (symlinks followed); else one clear InputError. Every
    input fedaudit opens goes through here first, so nothing blocks on a FIFO or a device."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} {str(p)!r} does not exist")
    if p.is_dir():
        raise InputError(f"{what} {str(p)!r} is a directory, expected a file")
    if not p.is_file():  # a FIFO, socket or device: opening it can block forever, and it is no recorded file
        raise InputError(f"{what} {str(p)!r} is not a regular file (a FIFO, socket or device?); fedaudit reads files")
    if not os.access(p, os.R_OK):
        raise InputError(f"{what} {str(p)!r} is not readable")
    return p


TEXT_LIMIT = 64 * 2**20  # a JSON config, a labels file, a tokenizer, a text file of lines: never more than this


def read_input_text(path: str | Path, what: str, limit: int = TEXT_LIMIT) -> str:
    """A small text input (UTF-8) through the one check every input passes (``check_readable``: a regular file, so
    a FIFO or ``/dev/zero`` is refused, never read) and a size bound checked before reading; one InputError else."""
    p = check_readable(path, what)
    size = p.stat().st_size
    if size > limit:
        raise InputError(f"{what} {str(p)!r} is {size:,} bytes, above the {limit // 2**20} MiB fedaudit reads for it")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{what} {str(p)!r} is not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}") from None


def read_safetensors(path: str | Path, what: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """All tensors and the ``__metadata__`` map of a safetensors file; any corruption is an InputError."""
    p = check_readable(path, what)
    if p.suffix.lower() in PICKLE_SUFFIXES:
        raise InputError(
            f"{what} {str(p)!r} looks like a pickle ({p.suffix}); fedaudit reads safetensors only. "
            "Convert it with 'fedaudit import checkpoint --allow-pickle' if you trust it"
        )
    try:
        with safe_open(str(p), framework="pt", device="cpu") as fh:
            metadata = dict(fh.metadata() or {})
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except SafetensorError as exc:
        raise InputError(f"{what} {str(p)!r} is not a valid safetensors file (truncated or corrupt: {exc})") from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise InputError(f"{what} {str(p)!r} cannot be read: {exc}") from None
    return tensors, metadata


def _check_parent_writable(path: Path) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise InputError(f"cannot write {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {str(path)!r}: folder {str(parent)!r} is not writable")
    if path.is_dir():
        raise InputError(f"cannot write {str(path)!r}: it is a directory")


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path`` and rename it into place (no half-written files)."""
    p = Path(path)
    _check_parent_writable(p)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)
        raise InputError(f"cannot write {str(p)!r}: {exc.strerror or exc}") from None
    return p


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def canonical_safetensors(data: bytes) -> bytes:
    """Re-serialise the header with sorted keys (safetensors writes metadata in hash-map order), padded
    with spaces to 8-byte alignment as the format allows: same tensors + metadata => same bytes and sha256."""
    n = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8:8 + n]), sort_keys=True, separators=(",", ":")).encode("utf-8")
    header += b" " * (-(8 + len(header)) % 8)
    return len(header).to_bytes(8, "little") + header + data[8 + n:]


def safetensors_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """Canonical safetensors bytes; tensors are made contiguous CPU copies (tied tensors are cloned)."""
    bad = [k for k, v in metadata.items() if not isinstance(v, str)]
    if bad:
        raise TypeError(f"safetensors metadata values must be strings: {bad}")
    clean = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    return canonical_safetensors(st_save(clean, metadata={"format": "pt", **metadata}))


def write_safetensors(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    """Atomic safetensors write."""
    return atomic_write_bytes(path, safetensors_bytes(tensors, metadata))


def finite_json(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, +-Infinity, which JSON cannot hold) replaced by null; when there were
    any and ``obj`` is a dict, its ``non_finite`` lists their JSON paths (``$.a.b[2]``), so a reader sees which
    numbers could not be computed instead of a crash or an invalid file."""
    found: list[str] = []

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            found.append(path)
            return None
        if isinstance(value, dict):
            return {k: walk(v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    clean = walk(obj, "$")
    if found and isinstance(clean, dict):
        clean["non_finite"] = found
    return clean


def dumps_json(obj: Any) -> str:
    """JSON text for every report and result fedaudit writes, by ``finite_json``'s rule for NaN and Infinity."""
    return json.dumps(finite_json(obj), indent=2, allow_nan=False, sort_keys=False) + "\n"
