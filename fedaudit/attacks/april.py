"""APRIL (Lu et al., "APRIL: Finding the Achilles' Heel on Privacy for Vision Transformers", CVPR 2022): a single
image in closed form from a vision transformer's learnable position embedding.

A ViT adds its position embedding P to the tokens, z = [c; E] + P with E = X W_e^T + b_e the patch tokens (X: the
image's patches, one row each). For one image the gradient of P is the upstream gradient of every token, g_P = G,
and the patch embedding's weight gradient is g_We = G_p^T X (G_p: the patch rows of G). Both are in the update, so

    X = argmin || G_p^T X - g_We ||   (least squares, float64, SVD-based: exact when rank(G_p) = Np <= D)

and un-patchifying X (row-major over the grid, (c, i, j) within a patch, Conv2d's weight order) gives the client's
image in the model's normalised space. This is the "patch-embedding route" of docs/methods/attacks.md (APRIL): it
needs neither the attention weights nor APRIL's block without LayerNorm (the paper's design A, which breaching's
closed form assumes), so it applies to standard pre-LN ViTs; the paper's route through block 0's q/k/v is not
implemented.

Not applicable, with the reason: no learnable position-embedding parameter (a fixed sine-cosine buffer, relative
position bias), its gradient or the patch embedding's withheld, more patches than the width (Np > D: not identifiable),
several local steps, or a batch of more than one image (recorded, or seen in the solve: for B > 1 the patch-weight
gradient is a sum over images that no single X explains, and the relative residual says so). The update is
converted to a gradient first (fedaudit/conversion.py); a one-step delta's scale and sign cancel in the solve.

The loop runs no optimisation: ``-n`` is 1 and the one "iteration" keeps the closed form. Gradient matching on ViTs
is ``ig``/``fedleak``; the closed form is this.
"""

from __future__ import annotations

from typing import Any

import torch

from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.registry import ATTACKS
from fedaudit.errors import NotApplicable
from fedaudit.models.normalize import denormalize
from fedaudit.requirements import SINGLE_STEP
from fedaudit.threat_model import ThreatModel

# parameter names of the learnable position embedding and the patch projection (timm / fedaudit, torchvision, HF)
POSITION = ("pos_embed", "encoder.pos_embedding", "vit.embeddings.position_embeddings", "embeddings.position_embeddings")
PATCH = ("patch_embed.weight", "patch_embed.proj.weight", "conv_proj.weight",
         "vit.embeddings.patch_embeddings.projection.weight", "embeddings.patch_embeddings.projection.weight")
# a relative residual above this means the solve did not explain the update: more than one image (float32 gradients
# of one image leave 1e-7 to 1e-5; two images leave about 0.5, measured on vit-tiny)
MAX_RESIDUAL = 1e-3


def position_index(names: list[str]) -> int:
    """Where the position embedding sits among the matched tensors (``ig --pos-weight``)."""
    from fedaudit.errors import InputError

    found = [i for i, n in enumerate(names) if n in POSITION]
    if not found:
        raise InputError("--pos-weight needs a vision transformer whose update shares its learnable position embedding")
    return found[0]


def channel(tm: ThreatModel) -> dict[str, Any]:
    """The position-embedding channel of an update: its parameters and whether the closed form applies (``inspect``)."""
    pos, patch = _names(tm)
    why = APRIL.why_not(tm)
    return {"position_embedding": pos, "patch_embedding": patch, "closed_form": not why, "why_not": why}


def _names(tm: ThreatModel) -> tuple[str | None, str | None]:
    params = dict(tm.model.named_parameters())
    return next((n for n in POSITION if n in params), None), next((n for n in PATCH if n in params), None)


def solve(tm: ThreatModel) -> tuple[torch.Tensor, dict[str, Any]]:
    """The closed form: the image [1, C, H, W] in the model's normalised space and the solve's diagnostics."""
    pos, patch = _names(tm)
    assert pos is not None and patch is not None  # why_not checked
    g_pos = tm.gradient[pos].detach().double().cpu().reshape(-1, tm.gradient[pos].shape[-1])  # [N, D]
    g_w = tm.gradient[patch].detach().double().cpu()  # [D, C, p, p]
    d, c, p, _ = g_w.shape
    _, h, w = tm.spec.input_shape
    grid_h, grid_w = h // p, w // p
    n_patches = grid_h * grid_w
    g_patch_rows = g_pos[g_pos.shape[0] - n_patches:]  # the patch tokens' rows (the extra tokens come first)
    a, b = g_patch_rows.T, g_w.reshape(d, -1)  # a X = b: [D, Np] [Np, C p p] = [D, C p p]
    x = torch.linalg.lstsq(a, b, driver="gelsd").solution
    residual = float((a @ x - b).norm() / b.norm().clamp_min(1e-300))
    s = torch.linalg.svdvals(g_patch_rows)
    image = x.reshape(grid_h, grid_w, c, p, p).permute(2, 0, 3, 1, 4).reshape(1, c, h, w)
    diag = {"route": "patch-embedding", "position_embedding": pos, "patch_embedding": patch,
            "relative_residual": residual, "condition": float(s[0] / s[-1].clamp_min(1e-300)),
            "rank": int((s > s[0] * 1e-10 * max(a.shape)).sum()), "patches": n_patches, "width": d}
    params = dict(tm.model.named_parameters())
    checks = {}
    cls_name = "cls_token" if pos == "pos_embed" else None
    if cls_name and tm.grad(cls_name) is not None and g_pos.shape[0] > n_patches:  # g_cls = g_P[0] (sums for any B)
        g_cls = tm.gradient[cls_name].detach().double().cpu().flatten()
        checks["class_token"] = float((g_cls - g_pos[0]).norm() / g_pos[0].norm().clamp_min(1e-300))
    bias = patch[: -len("weight")] + "bias"
    if bias in params and tm.grad(bias) is not None:  # g_be = the sum of the patch rows
        g_b = tm.gradient[bias].detach().double().cpu()
        checks["patch_bias"] = float((g_b - g_patch_rows.sum(0)).norm() / g_b.norm().clamp_min(1e-300))
    diag["consistency"] = checks
    return image, diag


@ATTACKS.register
class APRIL(OptimizationAttack):
    name = "april"
    summary = "closed-form single image from a ViT's position-embedding and patch-embedding gradients (exact, B = 1)"
    paper = "Lu et al. 2022, APRIL (CVPR)"
    requires = (SINGLE_STEP,)
    defaults = {"iterations": 1, "lr": 1.0, "schedule": "none", "restarts": 1}
    optimizer_name = "closure"
    closed_form = True
    default_labels = "idlg"
    options = ()

    @classmethod
    def why_not(cls, tm):
        reasons = super().why_not(tm)
        pos, patch = _names(tm)
        if pos is None:
            reasons.append("the model has no learnable position-embedding parameter (a fixed embedding is a buffer: "
                           "no gradient to read)")
        elif tm.grad(pos) is None:
            reasons.append(f"the update withholds the position embedding's gradient ({pos})")
        if patch is None:
            reasons.append("the model has no patch-embedding projection APRIL knows (patch_embed, conv_proj)")
        elif tm.grad(patch) is None:
            reasons.append(f"the update withholds the patch embedding's gradient ({patch})")
        if reasons:
            return reasons
        d, _, p, _ = tm.gradient[patch].shape
        _, h, w = tm.spec.input_shape
        if (h // p) * (w // p) > d:
            return [f"{(h // p) * (w // p)} patches exceed the width {d}: the closed form is not identifiable"]
        if tm.batch_size and tm.batch_size > 1:
            return [f"the closed form recovers one image; this update records a batch of {tm.batch_size}"]
        _, diag = solve(tm)
        if diag["rank"] == 0:
            return ["the position embedding's gradient is zero: nothing flows back to the embeddings (torchvision's "
                    "ViTs start with a zero head, so their round-0 updates leak only through the head)"]
        if diag["rank"] < diag["patches"]:
            return [f"the patch rows of the position embedding's gradient have rank {diag['rank']} of {diag['patches']}: "
                    "the closed form is not identifiable"]
        if diag["relative_residual"] > MAX_RESIDUAL:
            return [f"the solve leaves a relative residual of {diag['relative_residual']:.2g} (one image leaves "
                    f"under {MAX_RESIDUAL:g}): the update holds more than one image"]
        return []

    def __init__(self, tm, engine, labels, options, num_images, iterations=None):
        super().__init__(tm, engine, labels, options, num_images, iterations)
        if num_images != 1:
            raise NotApplicable(f"april recovers one image; {num_images} labels were given")
        x, self.diag = solve(tm)
        self.solved = denormalize(x.float(), tm.spec).clamp(0, 1).to(engine.device)

    def init_state(self, gen):
        return {"x": self.solved.clone()}

    def closure(self, state, it):
        return torch.tensor(self.diag["relative_residual"], device="cpu")  # nothing to optimise: the closed form is the answer

    def distance(self, state):
        return float(self.diag["relative_residual"])

    def why_not_batched(self):
        return "a closed form: one solve"

    def extras(self, state):
        return {"section": "recovered", "report": {"closed_form": self.diag}, "tensors": {}}
