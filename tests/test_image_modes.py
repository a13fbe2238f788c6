"""Every image mode Pillow opens reaches [0, 1] at its true values, or is refused with a reason (checked against a
reference decode of known pixel values, not by eye)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fedaudit.errors import InputError
from fedaudit.io.images import load_images

GREY = (np.arange(64, dtype=np.float64).reshape(8, 8) * 4)  # 0 .. 252: exact in 8 bits
RGB = np.stack([GREY, 252 - GREY, np.full((8, 8), 128.0)], axis=2)


def load(tmp_path, img: Image.Image, suffix: str, channels: int) -> np.ndarray:
    path = tmp_path / f"x{suffix}"
    img.save(path)
    return load_images(path, (channels, 8, 8)).images[0].numpy()


@pytest.mark.parametrize("mode", ["L", "P", "1"])
def test_eight_bit_and_bilevel_grey_modes(tmp_path, mode):
    source = GREY if mode != "1" else (GREY > 120) * 255.0
    img = Image.fromarray(source.astype(np.uint8), "L")
    img = img.convert(mode)
    got = load(tmp_path, img, ".png", 1)[0]
    assert np.allclose(got, source / 255.0, atol=1e-6)


@pytest.mark.parametrize("mode, suffix", [("RGB", ".png"), ("RGBA", ".png"), ("RGB", ".bmp"), ("CMYK", ".tiff"),
                                          ("RGB", ".tiff")])
def test_colour_modes_reach_their_values(tmp_path, mode, suffix):
    img = Image.fromarray(RGB.astype(np.uint8), "RGB").convert(mode)
    got = load(tmp_path, img, suffix, 3)
    assert np.allclose(got.transpose(1, 2, 0), RGB / 255.0, atol=1e-6), mode


def test_a_colour_image_for_a_grey_model_is_its_luma(tmp_path):
    img = Image.fromarray(RGB.astype(np.uint8), "RGB")
    got = load(tmp_path, img, ".png", 1)[0]
    luma = np.floor((RGB @ np.array([299, 587, 114]) + 500) / 1000)  # ITU-R 601, Pillow's integer rounding
    assert np.abs(got * 255 - luma).max() <= 1


def test_sixteen_bit_grey_keeps_its_full_range(tmp_path):
    values = (np.arange(64).reshape(8, 8) * 1000).astype(np.uint16)  # up to 63000: Pillow's L conversion clips it
    got = load(tmp_path, Image.fromarray(values), ".png", 1)[0]
    assert np.allclose(got, values / 65535.0, atol=1e-6)
    colour = load(tmp_path, Image.fromarray(values), ".tiff", 3)
    assert np.allclose(colour, (values / 65535.0)[None].repeat(3, 0), atol=1e-6)


def test_float_images_on_the_unit_interval_are_read_as_they_are(tmp_path):
    values = (np.arange(64).reshape(8, 8) / 63.0).astype(np.float32)
    got = load(tmp_path, Image.fromarray(values, "F"), ".tiff", 1)[0]
    assert np.allclose(got, values, atol=1e-7)


@pytest.mark.parametrize("img, reason", [
    (Image.fromarray((np.arange(64).reshape(8, 8) * 2.0).astype(np.float32), "F"), r"outside \[0, 1\]"),
    (Image.fromarray(np.arange(64, dtype=np.int32).reshape(8, 8) * 70000, "I"), "value range"),
])
def test_images_whose_range_is_unknown_are_refused_with_the_reason(tmp_path, img, reason):
    with pytest.raises(InputError, match=reason):
        load(tmp_path, img, ".tiff", 1)
