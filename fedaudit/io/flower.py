"""Flower-style positional arrays (``np.savez`` of a parameter list, as ``parameters_to_ndarrays`` gives).

Flower's legacy ``NumPyClient`` sends a list without names, built from ``state_dict().items()`` (buffers
included) in most examples, or from ``parameters()``. The names are recovered from the checkpoint's
architecture in that order. Loaded with ``allow_pickle=False``: an .npz holding object arrays is refused.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fedaudit.errors import InputError
from fedaudit.io.files import check_readable

ORDERS = ("state_dict", "parameters")


def read_npz_list(path: str | Path) -> list[np.ndarray]:
    """The arrays of an .npz in positional order (``arr_0, arr_1, ...``, or keys ending in an index)."""
    p = check_readable(path, "arrays")
    try:
        _check_claimed_sizes(p)
        with np.load(p, allow_pickle=False) as npz:  # never unpickle a capture
            keys = list(npz.keys())
            index = {k: int(m.group(1)) for k in keys if (m := re.search(r"(\d+)$", k))}
            if len(index) != len(keys) or sorted(index.values()) != list(range(len(keys))):
                raise InputError(f"arrays {str(p)!r}: keys {keys[:4]}... are not a positional list (arr_0, arr_1, ...)")
            return [npz[k] for k in sorted(keys, key=lambda k: index[k])]
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"arrays {str(p)!r} is not a readable .npz of numeric arrays (pickled objects are refused): {exc}") from None


def _check_claimed_sizes(p: Path) -> None:
    """Refuse an array whose .npy header claims more data than the archive member holds, before numpy allocates
    it (a rewritten header could otherwise ask for terabytes)."""
    with zipfile.ZipFile(p) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            with zf.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, dtype = read_header(fh)
            need = int(np.prod(shape, dtype=object)) * dtype.itemsize
            if need > info.file_size:
                raise InputError(f"arrays {str(p)!r}: {info.filename} claims shape {list(shape)} ({need:,} bytes) but "
                                 f"holds {info.file_size:,} bytes")


def positional_names(model: nn.Module, order: str) -> list[str]:
    if order == "state_dict":
        return list(model.state_dict().keys())
    if order == "parameters":
        return [n for n, _ in model.named_parameters()]
    raise InputError(f"--order must be one of {', '.join(ORDERS)}")


def name_arrays(arrays: list[np.ndarray], model: nn.Module, order: str) -> dict[str, torch.Tensor]:
    names = positional_names(model, order)
    if len(arrays) != len(names):
        raise InputError(f"{len(arrays)} arrays, but the architecture's {order} order has {len(names)} tensors")
    ref = model.state_dict()
    out = {}
    for i, (name, arr) in enumerate(zip(names, arrays)):
        if tuple(arr.shape) != tuple(ref[name].shape):
            raise InputError(f"array {i} has shape {list(arr.shape)}, but {name!r} (position {i} in {order} order) "
                             f"is {list(ref[name].shape)}")
        if arr.dtype.kind not in "fiub":
            raise InputError(f"array {i} ({name!r}) has non-numeric dtype {arr.dtype}")
        # np.require keeps a 0-d array 0-d (BatchNorm's num_batches_tracked); np.ascontiguousarray made it shape [1]
        t = torch.from_numpy(np.require(arr, requirements="C"))
        if ref[name].is_floating_point():  # parameters and float buffers: floats, finite, in the model's precision
            if arr.dtype.kind != "f":
                raise InputError(f"array {i} ({name!r}) is {arr.dtype}, but that tensor is floating point")
            if not torch.isfinite(t).all():
                raise InputError(f"array {i} ({name!r}) holds NaN or Inf")
            t = t.to(ref[name].dtype)
        out[name] = t
    return out


def npz_update(arrays: str | Path, model: nn.Module, base_sha256: str | None, *, kind: str = "weights",
               order: str = "state_dict", delta_sign: str = "local_minus_global", reduction: str = "mean",
               batch_size: int | None = None, local_steps: int = 1, lr: float | None = None,
               num_examples: int | None = None, bn_mode: str | None = None, momentum: float = 0.0,
               weight_decay: float = 0.0):
    """A Flower-style .npz as a recorded update: its named tensors and metadata (``fedaudit import flower-npz``)."""
    from fedaudit.io.update import UpdateMeta

    tensors = name_arrays(read_npz_list(arrays), model, order)
    if kind != "gradient" and lr is None:
        raise InputError(f"a {kind} update needs --lr (and --local-steps) to become a gradient")
    if kind == "gradient" and reduction not in ("mean", "sum"):
        raise InputError("--reduction must be mean or sum")
    meta = UpdateMeta(
        kind=kind, delta_sign=delta_sign if kind == "delta" else None,
        reduction=reduction if kind == "gradient" else None, batch_size=batch_size, local_steps=local_steps,
        local_lr=lr if kind != "gradient" else None, num_examples=num_examples, bn_mode=bn_mode,
        base_checkpoint_sha256=base_sha256, optimizer={"name": "sgd", "momentum": momentum, "weight_decay": weight_decay},
        source={"framework": "flwr", "format": "npz", "order": order, "file": Path(arrays).name},
    )
    return tensors, meta


def write_npz(path: str | Path, arrays: list[np.ndarray]) -> None:
    """``np.savez(path, *arrays)``'s layout (``arr_0.npy``, ...) with fixed member dates, so the file is the same
    bytes every time (the shipped sample's; numpy stamps the current time)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for i, arr in enumerate(arrays):
            with zf.open(zipfile.ZipInfo(f"arr_{i}.npy", date_time=(1980, 1, 1, 0, 0, 0)), "w") as fh:
                np.lib.format.write_array(fh, np.require(arr, requirements="C"), allow_pickle=False)
