"""RGLA ("Reverse Gradient Leakage Attack using Inverted Cross-Entropy Loss Function"), Algorithm 1.

1. Invert cross-entropy: dummy logits Z' [B, C] ~ N(0, 1) minimise
   alpha1 L_w + alpha2 L_b + alpha3 L_loss (Prop. 1, Eq. 3, Prop. 2; fedaudit/attacks/ce_inversion.py).
2. Features: f' = pinv(G'^T) gW (Eq. 5), exact when rank(G) = B, i.e. B <= C - 1 (rows of P - Y sum to zero).
3. Images: when the output layer is fed by a ReLU(Linear) chain from the input (an MLP), analytically, layer by
   layer (fedaudit/attacks/linear_inversion.py); otherwise with a feature-to-image inverter trained for this
   backbone (``--inverter`` from ``fedaudit train-inverter``); without one the attack stops after step 2 and
   says so. The recovered logits (per-sample confidences and losses) and features are leakage in themselves and
   go into the report and reconstruction.safetensors.

Choices (docs/methods/attacks.md, RGLA), each an option:
* ``--solver lm`` (default, ours): Levenberg-Marquardt steps on the same residuals, first on the paper's full
  objective (L_loss picks the right basin among the "twin" solutions), then, once that stalls, on the exact
  identities L_w, L_b alone (Prop. 2 is only approximate), which takes the logits to the precision of the update
  in tens of steps. ``--solver adam``: the paper (Adam, lr 1e-3; use ``-n 20000``), no second phase.
* ``--differentiate-g``: differentiate through G' = softmax(Z') - Y (the equations; default) or hold it
  constant per step (the official code, which makes L_b inert: the paper's Table 3 rows L_w and L_w + L_b are
  identical).
* alpha = (1e4, 1, 100) as the paper (the code uses alpha3 = 1).
* Restarts (default 4, each a fresh N(0, 1) start) keep the lowest exact residual: never the truth. Samples that
  share a label are interchangeable in every equation, so their order within the label group is arbitrary.
"""

from __future__ import annotations

import math

import torch

from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.ce_inversion import CEInversion
from fedaudit.attacks.linear_inversion import fc_chain, invert_chain
from fedaudit.attacks.registry import ATTACKS
from fedaudit.errors import InputError
from fedaudit.methods import MethodOption
from fedaudit.models.normalize import denormalize
from fedaudit.requirements import BATCH_SIZE, FINAL_BIAS_GRAD, FINAL_WEIGHT_GRAD, SINGLE_STEP

CONFIDENT = 0.5  # a recovered sample this sure of a class breaks Prop. 2's near-uniform assumption


@ATTACKS.register
class RGLA(OptimizationAttack):
    name = "rgla"
    summary = "invert cross-entropy: logits, each sample's output-layer input (pinv), then images (FC chain or inverter)"
    paper = "RGLA: Reverse Gradient Leakage Attack using Inverted Cross-Entropy Loss Function"
    requires = (FINAL_WEIGHT_GRAD, FINAL_BIAS_GRAD, BATCH_SIZE, SINGLE_STEP)
    defaults = {"iterations": 200, "lr": 1e-3, "schedule": "none", "restarts": 4}
    optimizer_name = "closure"
    options = (
        MethodOption("solver", str, "lm", "lm: Levenberg-Marquardt, full objective then exact identities (ours); "
                     "adam: the paper (use -n 20000 --lr 0.001)", ("lm", "adam")),
        MethodOption("alpha-w", float, 1e4, "alpha1: weight of L_w (Proposition 1)"),
        MethodOption("alpha-b", float, 1.0, "alpha2: weight of L_b (Eq. 3)"),
        MethodOption("alpha-loss", float, 100.0, "alpha3: weight of L_loss (Proposition 2; the code uses 1)"),
        MethodOption("differentiate-g", bool, True, "differentiate through G' (the equations); off: constant G' per step (the code)"),
        MethodOption("inverter", str, "", "feature-to-image inverter from 'fedaudit train-inverter' for this checkpoint"),
        MethodOption("analytic", bool, True, "recover inputs analytically when a ReLU(Linear) chain feeds the output layer from the input"),
    )

    @classmethod
    def why_not(cls, tm):
        reasons = super().why_not(tm)
        c, b = tm.spec.num_classes, tm.batch_size
        if b and b > c - 1:
            reasons.append(f"exact feature recovery needs B <= classes - 1 (rank of softmax - onehot is at most "
                           f"min(B, C - 1)); B = {b}, C = {c}")
        return reasons

    def __init__(self, tm, engine, labels, options, num_images, iterations=None):
        super().__init__(tm, engine, labels, options, num_images, iterations)
        options = self.opts
        final = tm.final_layer
        params = dict(tm.model.named_parameters())
        self.inv = CEInversion(tm.output_grad("weight"), tm.output_grad("bias"), params[f"{final}.weight"].detach(),
                               params[f"{final}.bias"].detach(), self.labels.cpu(),
                               (options["alpha-w"], options["alpha-b"], options["alpha-loss"]), options["differentiate-g"])
        self.chain = fc_chain(tm.model, final) if options["analytic"] else None
        if self.chain and any(tm.grad(f"{n}.weight") is None for n in self.chain):
            self.chain = None
        self.inverter, self.inverter_meta = None, {}
        if options["inverter"]:
            from fedaudit.io.inverter import load_inverter

            self.inverter, self.inverter_meta = load_inverter(options["inverter"])
            if self.inverter_meta.get("fedaudit.backbone_sha256") != tm.checkpoint.sha256:
                raise InputError(f"inverter {options['inverter']!r} was trained for another checkpoint; train one for "
                                 "this checkpoint with 'fedaudit train-inverter'")
            if self.inverter.cfg.feature_dim != self.inv.gW.shape[1]:
                raise InputError(f"inverter {options['inverter']!r} takes {self.inverter.cfg.feature_dim} features; "
                                 f"this output layer has {self.inv.gW.shape[1]} inputs")

    # --- the logit optimisation -------------------------------------------------------------------------------
    def init_state(self, gen):
        z = torch.randn(self.num_images, self.inv.C, generator=gen, dtype=torch.float64, device="cpu")
        if self.opts["solver"] == "adam":
            return {"z": z.requires_grad_(True)}
        return {"z": z, "mu": torch.tensor(1e-3, dtype=torch.float64, device="cpu"),
                "phase": torch.tensor(0.0, dtype=torch.float64, device="cpu")}

    def optimizer(self, state, lr):
        if self.opts["solver"] == "adam":
            return torch.optim.Adam([state["z"]], lr=lr)
        return super().optimizer(state, lr)

    def closure(self, state, it):
        if self.opts["solver"] == "adam":
            loss = self.inv.losses(state["z"])["total"]
            (state["z"].grad,) = torch.autograd.grad(loss, [state["z"]])
            return loss.detach()
        exact = bool(state["phase"] > 0)
        z, mu, before, after = self.inv.lm_step(state["z"], float(state["mu"]), with_loss=not exact)
        if not exact and (before - after <= 1e-12 * before or mu >= 1e8):  # the full objective has stalled
            state["phase"].fill_(1.0)
            mu = 1e-3
        state["z"].copy_(z)
        state["mu"].fill_(mu)
        return torch.tensor(after, device="cpu")

    def project(self, state):
        pass  # logits are unconstrained

    def distance(self, state):
        rw, rb = self.inv.residuals(state["z"].detach())
        return float(rw.norm() / self.inv.target.norm().clamp_min(1e-300) + rb.norm() / self.inv.gb.norm().clamp_min(1e-300))

    # --- features and images ------------------------------------------------------------------------------------
    def _features(self, state):
        z = state["z"].detach().double()
        f, diag = self.inv.features(z)
        return z, f, diag

    def images_source(self) -> str:
        return "analytic" if self.chain else ("inverter" if self.inverter is not None else "none")

    def images(self, state):
        z, f, _ = self._features(state)
        c, h, w = self.tm.spec.input_shape
        if self.chain:
            params = {k: v.detach() for k, v in self.tm.model.named_parameters()}
            x, _ = invert_chain(params, self.tm.gradient, self.chain, self.inv.G(z), f)
            return denormalize(x.float().reshape(-1, c, h, w), self.tm.spec).clamp(0, 1)
        if self.inverter is not None:
            with torch.no_grad():
                return self.inverter(f.float()).clamp(0, 1)
        return torch.zeros(0, c, h, w, device="cpu")

    def extras(self, state):
        z, f, diag = self._features(state)
        p = torch.softmax(z, dim=1)
        per_sample_loss = -torch.log(p[torch.arange(len(self.labels), device=p.device), self.labels.to(p.device)].clamp_min(1e-300))
        warnings = []
        if float(p.max()) > CONFIDENT:
            warnings.append(f"a recovered sample has confidence {float(p.max()):.2f}: Proposition 2 assumes a near-untrained "
                            "output layer, so L_loss may have pointed to a wrong solution")
        if self.inv.l_hat_terms_skipped:
            warnings.append(f"{self.inv.l_hat_terms_skipped} non-positive terms skipped in Proposition 2's loss estimate")
        if not math.isfinite(self.inv.l_hat):
            warnings.append("Proposition 2's loss estimate is undefined here (no positive term): L_loss was off")
        source = self.images_source()
        report = {
            "stage": "images" if source != "none" else "features",
            "images_from": source,
            "images_note": None if source != "none" else
            "no inverter: stopped after the feature stage; train one with 'fedaudit train-inverter' and pass --inverter",
            "logits": z.tolist(), "confidences": p.max(1).values.tolist(), "predicted": p.argmax(1).tolist(),
            "per_sample_loss": per_sample_loss.tolist(), "loss_estimate_prop2": self.inv.l_hat,
            "features_shape": list(f.shape), "feature_norms": f.norm(dim=1).tolist(),
            "conditioning": diag, "warnings": warnings,
        }
        if self.chain:
            _, chain_diag = invert_chain({k: v.detach() for k, v in self.tm.model.named_parameters()}, self.tm.gradient,
                                         self.chain, self.inv.G(z), f)
            report["analytic_chain"] = {"layers": self.chain, "solves": chain_diag}
        if self.inverter is not None:
            report["inverter"] = {"file": self.opts["inverter"], "bn_mode": self.inverter_meta.get("fedaudit.bn_mode")}
            if self.inverter_meta.get("fedaudit.bn_mode") != (self.tm.meta.bn_mode or "eval"):
                warnings.append(f"the inverter was trained on {self.inverter_meta.get('fedaudit.bn_mode')}-mode features; "
                                f"the update records bn_mode {self.tm.meta.bn_mode}")
        return {"section": "recovered", "report": report, "tensors": {"logits": z.float(), "features": f.float()}}
