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
        with np.load(p, allow_pickle=False) as npz:  # never unpickle a capture
            keys = list(npz.keys())
            index = {k: int(m.group(1)) for k in keys if (m := re.search(r"(\d+)$", k))}
            if len(index) != len(keys) or sorted(index.values()) != list(range(len(keys))):
                raise InputError(f"arrays {str(p)!r}: keys {keys[:4]}... are not a positional list (arr_0, arr_1, ...)")
            return [npz[k] for k in sorted(keys, key=lambda k: index[k])]
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"arrays {str(p)!r} is not a readable .npz of numeric arrays (pickled objects are refused): {exc}") from None


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
        out[name] = torch.from_numpy(np.ascontiguousarray(arr))
    return out
