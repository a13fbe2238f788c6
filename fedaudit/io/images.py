"""Images in: a folder of image files, one image file, or a safetensors tensor; always [0,1] float NCHW."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from fedaudit.errors import InputError
from fedaudit.io.files import check_readable, read_safetensors

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
# the formats Pillow may decode, sniffed by content whatever the file's name: never EPS/PS (Pillow hands those to
# Ghostscript, a program found on PATH: a file named .png holding EPS started `gs` during `capture`, issue 88)
FORMATS = ("PNG", "JPEG", "BMP", "GIF", "WEBP", "TIFF")


@dataclass
class ImageBatch:
    images: torch.Tensor  # [N, C, H, W] float32 in [0, 1]
    names: list[str]
    labels: torch.Tensor | None = None  # int64 [N] when the source carries them


def _fit(img: Image.Image, size: tuple[int, int], resize: bool, name: str) -> Image.Image:
    """Resize the shorter side and centre-crop to (H, W) when ``resize``; otherwise sizes must match."""
    h, w = size
    if img.size == (w, h):
        return img
    if not resize:
        raise InputError(f"image {name!r} is {img.size[0]}x{img.size[1]}, the model takes {w}x{h} (pass --resize to centre-crop and resize)")
    scale = max(w / img.size[0], h / img.size[1])
    new = (max(w, round(img.size[0] * scale)), max(h, round(img.size[1] * scale)))
    img = img.resize(new, Image.Resampling.BICUBIC)
    left, top = (new[0] - w) // 2, (new[1] - h) // 2
    return img.crop((left, top, left + w, top + h))


MAX_PIXELS = 64 * 10**6  # an image file above this is refused before decoding (a decompression bomb or a mistake)


SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")


def _decode(src: Image.Image, channels: int, path: Path) -> tuple[Image.Image, float]:
    """``src`` as an image whose pixel values divided by the returned full scale are its true values in [0, 1]:

    * 8-bit modes (1, L, P, RGB, RGBA, LA, CMYK, YCbCr, ...): Pillow's conversion to L or RGB (alpha dropped; an RGB
      image for a grey model by ITU-R 601 luma), full scale 255;
    * 16-bit grey (I;16 and its byte orders, e.g. a 16-bit PNG): the raw values over 65535, as 32-bit float (Pillow's
      own conversion to L clips every value above 255 to white);
    * 32-bit float (F, e.g. a float TIFF): the values themselves when they are finite and in [0, 1], else refused;
    * 32-bit integer (I) and anything else: refused, since their full scale is not known from the file.
    """
    mode = src.mode
    if mode in SIXTEEN_BIT:
        return Image.fromarray(np.asarray(src, dtype=np.float32), mode="F"), 65535.0
    if mode == "F":
        arr = np.asarray(src, dtype=np.float32)
        if not np.isfinite(arr).all() or arr.min() < 0 or arr.max() > 1:
            raise InputError(f"image {str(path)!r} is a float image with values outside [0, 1] (min {arr.min():.3g}, "
                             f"max {arr.max():.3g}); fedaudit reads float images on [0, 1] only")
        return src.copy(), 1.0
    if mode == "I" or mode.startswith("I;32") or mode not in Image.MODES:
        raise InputError(f"image {str(path)!r} has pixel mode {mode!r}, whose value range the file does not fix; "
                         "save it as 8- or 16-bit (PNG) or as a float image on [0, 1]")
    return src.convert("L" if channels == 1 else "RGB"), 255.0


def _load_file(path: Path, input_shape, resize: bool) -> torch.Tensor:
    c, h, w = input_shape
    check_readable(path, "image")  # a FIFO or device in a folder of images is refused, never opened
    try:
        with Image.open(path, formats=FORMATS) as src:  # lazy: the size is known before any pixel is decoded
            if src.width * src.height > MAX_PIXELS:
                raise InputError(f"image {str(path)!r} is {src.width} x {src.height} pixels, above the "
                                 f"{MAX_PIXELS // 10**6} megapixels fedaudit decodes; downscale it first")
            decoded, full_scale = _decode(src, c, path)
            arr = np.asarray(_fit(decoded, (h, w), resize, path.name), dtype=np.float32) / full_scale
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError, SyntaxError, ValueError) as exc:
        raise InputError(f"cannot read image {str(path)!r}: {exc}") from None
    if c not in (1, 3):
        raise InputError(f"image files give 1 or 3 channels; the model takes {c}")
    if arr.ndim == 2 and c == 3:  # a high-bit-depth grey image for a colour model: grey in every channel
        arr = np.repeat(arr[..., None], 3, axis=2)
    t = torch.from_numpy(np.ascontiguousarray(arr)).clamp(0, 1)  # only resampling overshoot is clamped
    return t.unsqueeze(0) if c == 1 else t.permute(2, 0, 1)


def _from_safetensors(path: Path, input_shape) -> ImageBatch:
    tensors, _ = read_safetensors(path, "images")
    if "images" not in tensors:
        raise InputError(f"images file {str(path)!r} has no 'images' tensor (found: {', '.join(sorted(tensors)) or 'none'})")
    x = tensors["images"]
    if x.ndim == 3:
        x = x.unsqueeze(0)
    if x.ndim != 4 or tuple(x.shape[1:]) != tuple(input_shape):
        raise InputError(f"'images' in {str(path)!r} has shape {list(x.shape)}; expected [N, {', '.join(map(str, input_shape))}]")
    if x.dtype == torch.uint8:
        x = x.float() / 255.0
    elif x.is_floating_point():
        x = x.float()
        if not torch.isfinite(x).all():
            raise InputError(f"'images' in {str(path)!r} contains NaN or Inf")
        if x.min() < -1e-6 or x.max() > 1 + 1e-6:
            raise InputError(f"'images' in {str(path)!r} must be in [0,1] (found [{x.min():.3g}, {x.max():.3g}])")
        x = x.clamp(0, 1)
    else:
        raise InputError(f"'images' in {str(path)!r} has dtype {x.dtype}; expected uint8 or float in [0,1]")
    labels = tensors.get("labels")
    if labels is not None:
        if labels.is_floating_point() or labels.ndim != 1 or labels.numel() != x.shape[0]:
            raise InputError(f"'labels' in {str(path)!r} must be an integer vector of length {x.shape[0]}")
        labels = labels.long()
    return ImageBatch(x.contiguous(), [f"{path.name}[{i}]" for i in range(x.shape[0])], labels)


def load_images(path: str | Path, input_shape, resize: bool = False) -> ImageBatch:
    p = Path(path)
    if not p.exists():
        raise InputError(f"images {str(p)!r} do not exist")
    if p.suffix == ".safetensors":
        return _from_safetensors(p, input_shape)
    files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES) if p.is_dir() else [p]
    if not files:
        raise InputError(f"folder {str(p)!r} has no image files ({', '.join(sorted(IMAGE_SUFFIXES))})")
    return load_image_files(files, input_shape, resize)


def load_image_files(files: list[Path], input_shape, resize: bool = False) -> ImageBatch:
    """These image files, in this order."""
    return ImageBatch(torch.stack([_load_file(Path(f), input_shape, resize) for f in files]), [Path(f).name for f in files])


def parse_labels(text: str | None, batch: ImageBatch, num_classes: int) -> torch.Tensor:
    """Labels from ``--image-labels``: a comma list ("3,8,8,0"), ``names`` (the trailing integer of each file
    name, e.g. ``cifar10_00_3.png`` -> 3), or nothing when the images file carries a labels tensor."""
    n = batch.images.shape[0]
    if text is None:
        if batch.labels is None:
            raise InputError("no labels: pass --image-labels 3,8,... or --image-labels names, or give a safetensors file with 'labels'")
        labels = batch.labels
    elif text == "names":
        found = [re.search(r"(\d+)$", Path(name).stem) for name in batch.names]
        missing = [nm for nm, m in zip(batch.names, found) if m is None]
        if missing:
            raise InputError(f"--image-labels names: file name {missing[0]!r} does not end in a class number")
        labels = torch.tensor([int(m.group(1)) for m in found if m is not None])
    else:
        try:
            labels = torch.tensor([int(v) for v in text.replace(" ", "").split(",") if v != ""])
        except ValueError:
            raise InputError(f"--image-labels must be comma-separated integers or 'names', got {text!r}") from None
    if labels.numel() != n:
        raise InputError(f"{labels.numel()} labels for {n} images")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise InputError(f"labels must be in [0, {num_classes - 1}] (found {int(labels.min())}..{int(labels.max())})")
    return labels.long()


def labels_from_csv(path: str | Path, batch: ImageBatch, num_classes: int) -> torch.Tensor:
    """Labels from a ``file,label`` CSV (``--image-labels-csv``; a header row ``file,label`` is allowed): every image
    of the batch listed once by its file name, no other file."""
    import csv

    p = check_readable(path, "labels CSV")
    try:
        with open(p, newline="", encoding="utf-8") as fh:
            rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"labels CSV {str(p)!r} cannot be read: {exc}") from None
    if rows and [c.strip().lower() for c in rows[0]] == ["file", "label"]:
        rows = rows[1:]
    mapping: dict[str, int] = {}
    for i, row in enumerate(rows, 1):
        if len(row) != 2:
            raise InputError(f"labels CSV {str(p)!r} row {i}: expected 'file,label', got {row!r}")
        name, label = row[0].strip(), row[1].strip()
        if name in mapping:
            raise InputError(f"labels CSV {str(p)!r} lists {name!r} twice")
        try:
            mapping[name] = int(label)
        except ValueError:
            raise InputError(f"labels CSV {str(p)!r} row {i}: label {label!r} is not an integer") from None
    unlisted = [n for n in batch.names if n not in mapping]
    if unlisted:
        raise InputError(f"labels CSV {str(p)!r} does not list image {unlisted[0]!r}"
                         + (f" (+{len(unlisted) - 1} more)" if len(unlisted) > 1 else ""))
    extra = sorted(set(mapping) - set(batch.names))
    if extra:
        raise InputError(f"labels CSV {str(p)!r} lists {extra[0]!r}, which is not among the images")
    labels = torch.tensor([mapping[n] for n in batch.names])
    if labels.min() < 0 or labels.max() >= num_classes:
        raise InputError(f"labels must be in [0, {num_classes - 1}] (found {int(labels.min())}..{int(labels.max())})")
    return labels.long()
