"""capture shows which file got which label, and takes an explicit file -> label CSV (issue 65)."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from .helpers import assert_one_error_line, sample


def folder(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for i, name in enumerate(["cat_3", "ship_8", "boat_8", "plane_0"]):
        Image.fromarray(np.full((32, 32, 3), 40 * i, dtype=np.uint8)).save(images / f"{name}.png")
    return images


def test_the_file_to_label_mapping_is_shown(cli, tmp_path):
    ckpt = sample("lenet_b1")[0]
    res = cli("capture", ckpt, folder(tmp_path), "--image-labels", "3,8,8,0", "-b", "4", "-o", tmp_path / "u.safetensors")
    got = [(r["file"], r["label"]) for r in json.loads(res.stdout)["images"]]
    # a comma list follows the sorted file names, which is not the order the names were written in above
    assert got == [("boat_8.png", 3), ("cat_3.png", 8), ("plane_0.png", 8), ("ship_8.png", 0)]
    assert "boat_8.png" in res.stderr and "images -> labels" in res.stderr


def test_a_csv_maps_each_file_to_its_label(cli, tmp_path):
    ckpt = sample("lenet_b1")[0]
    images = folder(tmp_path)
    csv = tmp_path / "labels.csv"
    csv.write_text("file,label\ncat_3.png,3\nship_8.png,8\nboat_8.png,8\nplane_0.png,0\n")
    res = cli("capture", ckpt, images, "--image-labels-csv", csv, "-b", "4", "-o", tmp_path / "u.safetensors", "-q")
    assert {r["file"]: r["label"] for r in json.loads(res.stdout)["images"]} == \
        {"cat_3.png": 3, "ship_8.png": 8, "boat_8.png": 8, "plane_0.png": 0}
    csv.write_text("cat_3.png,3\nship_8.png,8\n")
    res = cli("capture", ckpt, images, "--image-labels-csv", csv, "-b", "4", "-o", tmp_path / "v.safetensors", expect=2)
    assert_one_error_line(res.stderr, "does not list image")
    res = cli("capture", ckpt, images, "--image-labels-csv", csv, "--image-labels", "names", "-b", "4",
              "-o", tmp_path / "w.safetensors", expect=2)
    assert_one_error_line(res.stderr, "not both")
