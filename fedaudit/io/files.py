"""Safe file primitives: safetensors read with clear errors, atomic writes, hashing."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

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


def check_readable(path: str | Path, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} {str(p)!r} does not exist")
    if p.is_dir():
        raise InputError(f"{what} {str(p)!r} is a directory, expected a file")
    if not os.access(p, os.R_OK):
        raise InputError(f"{what} {str(p)!r} is not readable")
    return p


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


def dumps_json(obj) -> str:
    """JSON text for reports: non-finite floats are an error (JSON has no NaN/Infinity)."""
    return json.dumps(obj, indent=2, allow_nan=False, sort_keys=False) + "\n"
