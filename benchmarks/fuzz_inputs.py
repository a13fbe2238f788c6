"""Mutations of the fuzzer's other inputs: label files (JSON), Flower .npz arrays and image folders.

Each ``mutate_*`` takes a random.Random and writes one mutated input into ``case`` (a fresh folder), returning a short
description and the path to give the command. The safetensors mutations (updates, checkpoints, truth files) are in
benchmarks/fuzz.py.
"""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save as st_save


def _bytes_mutation(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    if rng.random() < 0.5:
        cut = rng.choice([0, 1, len(data) // 2, len(data) - 1, rng.randrange(len(data) + 1)])
        return f"truncate@{cut}", data[:cut]
    out = bytearray(data)
    where = rng.randrange(len(out))
    out[where] ^= 1 << rng.randrange(8)
    return f"flip@{where}", bytes(out)


# --- label files (fedaudit labels -o FILE, or a safetensors 'labels' tensor) ----------------------------------------
def mutate_labels_file(labels: list[int], case: Path, rng: random.Random) -> tuple[str, Path]:
    kind = rng.choice(["value", "value", "value", "structure", "bytes", "safetensors"])
    path = case / "labels.json"
    doc: object = {"method": "llg", "labels": list(labels)}
    if kind == "value":
        value = rng.choice([5, "abc", None, {"a": 1}, [1.5] * len(labels), [-1] * len(labels), [99] * len(labels), [],
                            [True] * len(labels), [[1]] * len(labels), [1e300] * len(labels), list(labels) * 3,
                            [str(v) for v in labels], [float("nan")] * len(labels), [2 ** 70] * len(labels)])
        doc = {"method": "llg", "labels": value}
        what = f"labels={json.dumps(value)[:30]}"
    elif kind == "structure":
        doc = rng.choice([[], "labels", 3, {"method": "llg"}, {"Labels": list(labels)}, None])
        what = f"document={json.dumps(doc)[:30]}"
    if kind in ("value", "structure"):
        path.write_text(json.dumps(doc))
        return what, path
    if kind == "bytes":
        what, data = _bytes_mutation(json.dumps(doc).encode(), rng)
        path.write_bytes(data)
        return what, path
    path = case / "labels.safetensors"
    t = rng.choice([torch.tensor(labels), torch.tensor(labels, dtype=torch.float32) + 0.5, torch.tensor(labels).reshape(1, -1),
                    torch.zeros(0, dtype=torch.int64), torch.tensor(labels, dtype=torch.int8) - 100])
    name = rng.choice(["labels", "labels", "label"])
    path.write_bytes(st_save({name: t.contiguous()}))
    return f"safetensors {name} {t.dtype} {list(t.shape)}", path


# --- Flower positional .npz ------------------------------------------------------------------------------------------
def _savez(arrays: dict[str, np.ndarray], allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=allow_pickle, **arrays)
    return buf.getvalue()


def _huge_npy_header(data: bytes) -> bytes:
    """The first array's .npy header rewritten to claim 10^12 elements (the data stays small)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for i, name in enumerate(src.namelist()):
            raw = src.read(name)
            if i == 0:
                hlen = struct.unpack("<H", raw[8:10])[0]
                header = raw[10:10 + hlen].decode("latin1")
                start, end = header.index("'shape': (") + len("'shape': ("), header.index(")")
                new = (header[:start] + "1000000, 1000000" + header[end:]).rstrip()
                new = new + " " * (-(10 + len(new) + 1) % 64) + "\n"
                raw = raw[:8] + struct.pack("<H", len(new)) + new.encode("latin1") + raw[10 + hlen:]
            dst.writestr(name, raw)
    return out.getvalue()


def mutate_npz(params: list[torch.Tensor], case: Path, rng: random.Random) -> tuple[str, Path]:
    arrays = [p.numpy().copy() for p in params]
    named = {f"arr_{i}": a for i, a in enumerate(arrays)}
    kind = rng.choice(["bytes", "drop", "extra", "swap", "dtype", "reshape", "values", "object", "zero", "scalar",
                       "names", "huge"])
    path = case / "arrays.npz"
    i = rng.randrange(len(arrays))
    if kind == "bytes":
        what, data = _bytes_mutation(_savez(named), rng)
        path.write_bytes(data)
        return what, path
    if kind == "drop":
        named.pop(f"arr_{len(arrays) - 1}")
    elif kind == "extra":
        named[f"arr_{len(arrays)}"] = np.zeros(3, dtype=np.float32)
    elif kind == "swap":
        j = rng.randrange(len(arrays))
        named[f"arr_{i}"], named[f"arr_{j}"] = arrays[j], arrays[i]
    elif kind == "dtype":
        named[f"arr_{i}"] = arrays[i].astype(rng.choice([np.int32, np.float16, np.complex64, np.bool_, np.uint8, np.float64]))
    elif kind == "reshape":
        named[f"arr_{i}"] = arrays[i].reshape(-1)
    elif kind == "values":
        a = arrays[i].copy()
        a.reshape(-1)[rng.randrange(a.size)] = rng.choice([np.nan, np.inf, -np.inf, 1e-45, 3e38])
        named[f"arr_{i}"] = a
    elif kind == "object":
        named[f"arr_{i}"] = np.array([arrays[i], "x"], dtype=object)
        path.write_bytes(_savez(named, allow_pickle=True))
        return f"pickled object array {i}", path
    elif kind == "zero":
        named[f"arr_{i}"] = np.zeros(0, dtype=np.float32)
    elif kind == "scalar":
        named[f"arr_{i}"] = np.float32(1.0)
    elif kind == "names":
        named = {f"layer{k}" if k != "arr_0" else "weights": v for k, v in named.items()}
    elif kind == "huge":
        path.write_bytes(_huge_npy_header(_savez(named)))
        return "npy header shape 10^12", path
    path.write_bytes(_savez(named))
    return f"{kind} {i}", path


# --- image folders (capture) -----------------------------------------------------------------------------------------
def _png(img: torch.Tensor) -> bytes:
    arr = (img.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    buf = io.BytesIO()
    Image.fromarray(arr.squeeze(-1) if arr.shape[-1] == 1 else arr).save(buf, format="PNG")
    return buf.getvalue()


def _huge_png_dimensions(data: bytes, w: int, h: int) -> bytes:
    """The IHDR chunk claims w x h pixels, with a valid CRC (a decompression bomb's header)."""
    ihdr = bytearray(data[12:29])  # type (4) + data (13)
    ihdr[4:12] = struct.pack(">II", w, h)
    return data[:12] + bytes(ihdr) + struct.pack(">I", zlib.crc32(bytes(ihdr)) & 0xFFFFFFFF) + data[33:]


def mutate_image_folder(images: torch.Tensor, labels: list[int], case: Path, rng: random.Random) -> tuple[str, Path]:
    folder = case / "images"
    folder.mkdir()
    files = []
    for k, (img, y) in enumerate(zip(images, labels)):
        f = folder / f"x{k:02d}_{y}.png"
        f.write_bytes(_png(img))
        files.append(f)
    f = rng.choice(files)
    kind = rng.choice(["bytes", "bytes", "empty", "text", "mode", "large", "bomb", "extra-file", "subdir", "name",
                       "none", "jpeg-as-png"])
    if kind == "bytes":
        what, data = _bytes_mutation(f.read_bytes(), rng)
        f.write_bytes(data)
        return f"{f.name} {what}", folder
    if kind == "empty":
        f.write_bytes(b"")
    elif kind == "text":
        f.write_text("not an image\n")
    elif kind == "mode":
        mode = rng.choice(["RGBA", "L", "P", "I;16", "1", "CMYK", "F"])
        src = Image.open(io.BytesIO(f.read_bytes()))
        (src.convert(mode) if mode != "I;16" else src.convert("L").convert("I;16")).save(
            f.with_suffix(".tiff") if mode in ("CMYK", "F") else f)
        if mode in ("CMYK", "F"):
            f.unlink()
        return f"{f.name} mode {mode}", folder
    elif kind == "large":
        Image.new("RGB", (rng.choice([33, 300, 3000]), rng.choice([31, 200, 2500]))).save(f)
    elif kind == "bomb":
        f.write_bytes(_huge_png_dimensions(f.read_bytes(), *rng.choice([(100_000, 100_000), (2 ** 31 - 1, 1), (0, 5)])))
    elif kind == "extra-file":
        (folder / "notes.txt").write_text("hello")
    elif kind == "subdir":
        (folder / "sub").mkdir()
        (folder / "sub" / "y_0.png").write_bytes(_png(images[0]))
    elif kind == "name":
        f.rename(folder / "no_class_number.png")
    elif kind == "none":
        for g in files:
            g.unlink()
    elif kind == "jpeg-as-png":
        Image.open(io.BytesIO(f.read_bytes())).convert("RGB").save(f, format="JPEG")
    return f"{f.name} {kind}", folder
