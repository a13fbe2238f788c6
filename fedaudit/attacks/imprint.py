"""Robbing the Fed's analytic attack (Fowl et al., ICLR 2022, section 3): whole images in closed form from an imprint
layer's gradient, for batches of hundreds, when the server shipped a model built to leak (docs/scan.md).

An imprint layer (the first linear layer, reading the flattened image) has every row a positive multiple s_i of one
query q and biases that place thresholds t_i = -b_i / s_i along q . x. With a ReLU after it and a next layer that
gives every unit the same upstream gradient c_n per image n (Robbing the Fed's all-ones layer), unit i's gradients
are, for a one-step update,

    dW_i = s_i-free sum over {n : q . x_n > t_i} of c_n x_n,    db_i = sum over the same n of c_n        (eq. 3-4)

so for consecutive thresholds t_i < t_{i+1} the differences isolate the images whose projection falls between them:
x = (dW_i - dW_{i+1}) / (db_i - db_{i+1}), exact when one image is there (the "cumulative" structure; the paper's
"sparse" variant reads each unit alone: x = dW_i / db_i, ``--structure sparse``). Bins that hold two or more images
give their c-weighted mean; empty bins are skipped (|db_i - db_{i+1}| at float noise). The B bins with the largest
|db| difference are returned, in the model's pixel space; fewer non-empty bins than B leave the rest gray (a
collision: said in the report).

Not applicable, with the reason: no linear layer whose rows are positive copies of one query (``--layer`` names
one), a layer that reads features rather than the image (a linearised stack: not implemented), the layer's gradients
withheld, several local steps.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.registry import ATTACKS
from fedaudit.errors import NotApplicable
from fedaudit.methods import MethodOption
from fedaudit.models.normalize import denormalize, normalize
from fedaudit.requirements import SINGLE_STEP

COPY_COS = 1.0 - 1e-6


def imprint_layer(tm, named: str | None = None) -> tuple[str | None, str]:
    """(the imprint layer's module name, why not) of the model: a named one, else the first ``nn.Linear`` reading the
    flattened input whose rows are positive multiples of one vector."""
    n_in = math.prod(tm.spec.input_shape)
    modules = dict(tm.model.named_modules())
    names = [named] if named else [k for k, m in modules.items() if isinstance(m, nn.Linear)]
    why = "no linear layer whose rows are copies of one query (an imprint layer)"
    for name in names:
        m = modules.get(name)
        if not isinstance(m, nn.Linear):
            why = f"{name!r} is not a linear layer of the model"
            continue
        w = m.weight.detach().double()
        if w.shape[0] < 2 or m.bias is None:
            why = f"{name!r} has {w.shape[0]} row(s){' and no bias' if m.bias is None else ''}: no bins to read"
            continue
        u = w / w.norm(dim=1, keepdim=True).clamp_min(1e-300)
        if float((u @ u[0]).min()) < COPY_COS:
            why = f"the rows of {name!r} are not positive copies of one query (not an imprint layer)"
            continue
        if m.in_features != n_in:
            why = (f"{name!r} reads {m.in_features} features, not the {n_in} input pixels (an imprint after a "
                   "linearised stack: not implemented)")
            continue
        return name, ""
    return None, why


@ATTACKS.register
class Imprint(OptimizationAttack):
    name = "imprint"
    summary = "closed-form images from an imprint layer's gradient (a model built to leak; exact per lone image)"
    paper = "Fowl et al. 2022, Robbing the Fed (ICLR)"
    requires = (SINGLE_STEP,)
    defaults = {"iterations": 1, "lr": 1.0, "schedule": "none", "restarts": 1}
    optimizer_name = "closure"
    closed_form = True
    default_labels = "auto"  # only their count is read: the closed form needs no labels
    options = (
        MethodOption("layer", str, "", "the imprint layer's module name (default: found from its rows)"),
        MethodOption("structure", str, "cumulative", "cumulative (ReLU bins, differences of consecutive bins) or "
                     "sparse (each bin alone)", choices=("cumulative", "sparse")),
    )

    @classmethod
    def why_not(cls, tm):
        reasons = super().why_not(tm)
        name, why = imprint_layer(tm)
        if name is None:
            return [*reasons, why]
        for p in ("weight", "bias"):
            if tm.grad(f"{name}.{p}") is None:
                reasons.append(f"the update withholds the imprint layer's {p} gradient ({name}.{p})")
        return reasons

    def __init__(self, tm, engine, labels, options, num_images, iterations=None):
        super().__init__(tm, engine, labels, options, num_images, iterations)
        structure = self.opts["structure"]
        name, why = imprint_layer(tm, self.opts["layer"] or None)
        if name is None:
            raise NotApplicable(why)
        x, self.diag = solve(tm, name, num_images, structure)
        self.solved = denormalize(x.float(), tm.spec).clamp(0, 1).to(engine.device)

    def init_state(self, gen):
        return {"x": self.solved.clone()}

    def closure(self, state, it):
        return torch.tensor(0.0)  # nothing to optimise: the closed form is the answer

    def distance(self, state):
        return 0.0

    def why_not_batched(self):
        return "a closed form: one solve"

    def extras(self, state):
        return {"section": "recovered", "report": {"closed_form": self.diag}, "tensors": {}}


def solve(tm, name: str, num_images: int, structure: str = "cumulative") -> tuple[torch.Tensor, dict[str, Any]]:
    """``num_images`` images [B, C, H, W] in the model's normalised space from layer ``name``'s gradients."""
    layer = dict(tm.model.named_modules())[name]
    w = layer.weight.detach().double().cpu()
    scale = w.norm(dim=1)
    t = -layer.bias.detach().double().cpu() / scale  # unit i fires where q . x > t_i (q: the unit query)
    order = torch.argsort(t)
    g_w = tm.gradient[f"{name}.weight"].detach().double().cpu()[order]
    g_b = tm.gradient[f"{name}.bias"].detach().double().cpu()[order]
    if structure == "cumulative":  # the images between thresholds i and i + 1; above the highest, the last bin alone
        d_w = torch.cat([g_w[:-1] - g_w[1:], g_w[-1:]])
        d_b = torch.cat([g_b[:-1] - g_b[1:], g_b[-1:]])
    else:
        d_w, d_b = g_w, g_b
    noise = float(g_b.abs().max()) * 1e-6
    live = torch.nonzero(d_b.abs() > noise).flatten()
    pick = live[torch.argsort(d_b[live].abs(), descending=True)][:num_images]
    c, h, wd = tm.spec.input_shape
    images = torch.zeros(num_images, c, h, wd, dtype=torch.float64)
    if pick.numel():
        images[: pick.numel()] = (d_w[pick] / d_b[pick, None]).reshape(-1, c, h, wd)
    if pick.numel() < num_images:  # gray in pixel space, written in the normalised space the others are in
        gray = normalize(torch.full((1, c, 1, 1), 0.5, dtype=torch.float64), tm.spec)
        images[pick.numel():] = gray.expand(num_images - pick.numel(), c, h, wd)
    diag = {"layer": name, "structure": structure, "bins": int(w.shape[0]), "non_empty_bins": int(live.numel()),
            "recovered": int(pick.numel()), "of": num_images,
            "collisions": max(0, num_images - int(live.numel())) if structure == "cumulative" else None}
    return images, diag
