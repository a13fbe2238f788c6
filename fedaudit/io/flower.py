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
        t = torch.from_numpy(np.ascontiguousarray(arr))
        if ref[name].is_floating_point():  # parameters and float buffers: floats, finite, in the model's precision
            if arr.dtype.kind != "f":
                raise InputError(f"array {i} ({name!r}) is {arr.dtype}, but that tensor is floating point")
            if not torch.isfinite(t).all():
                raise InputError(f"array {i} ({name!r}) holds NaN or Inf")
            t = t.to(ref[name].dtype)
        out[name] = t
    return out
