"""Inverting cross-entropy (RGLA, Algorithm 1 lines 2-7): the batch's logits from the output layer's gradients,
then every sample's output-layer input feature in closed form.

Shapes (PyTorch): features f [B, H], weight W [C, H], bias b [C], logits Z = f W^T + 1 b^T [B, C].
For mean-reduced CE, G = dl/dZ = (softmax(Z) - onehot(y)) / B, and the update carries gW = G^T f, gb = G^T 1.

* Proposition 1: gW W^T = G^T (Z - 1 b^T)  (C x C equations, left side known)            -> L_w
* Eq. 3:         gb = G^T 1                                                                   -> L_b
* Proposition 2: l_hat = -(1/B) sum_i ln(gb[y_i] + lambda_{y_i}/B)  (near-uniform head)       -> L_loss
* Eq. 5:         f' = pinv(G'^T) gW

Exact feature recovery needs rank(G) = B, and the rows of P - Y sum to zero, so B <= C - 1 (the paper's
"B <= C + 1" is too loose; docs/methods/attacks.md, RGLA).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


class CEInversion:
    """The three residuals of RGLA for one batch; everything in float64."""

    def __init__(self, gW: torch.Tensor, gb: torch.Tensor, W: torch.Tensor, b: torch.Tensor, labels: torch.Tensor,
                 weights: tuple[float, float, float] = (1e4, 1.0, 100.0), differentiate_g: bool = True,
                 relative: bool = True):
        self.gW, self.gb = gW.double().reshape(gW.shape[0], -1), gb.double()
        self.W, self.b = W.double().reshape(W.shape[0], -1), b.double()
        self.labels = labels.long()
        self.B, self.C = len(labels), self.gW.shape[0]
        self.Y = F.one_hot(self.labels, self.C).double()
        self.target = self.gW @ self.W.T  # Proposition 1's known left side, computed once [C, C]
        self.weights = weights
        self.differentiate_g = differentiate_g
        self.l_hat, self.l_hat_terms_skipped = self._loss_estimate()
        # relative: each residual divided by the size of its known side, so the alphas weigh comparable numbers
        # whatever the model's scale (the paper's alphas were set for ResNet-50's 100k-dim features)
        self.scales = ((1 / float(self.target.norm().clamp_min(1e-300)), 1 / float(self.gb.norm().clamp_min(1e-300)),
                        1 / max(abs(self.l_hat), 1e-300) if math.isfinite(self.l_hat) else 1.0) if relative else (1.0, 1.0, 1.0))

    def _loss_estimate(self) -> tuple[float, int]:
        """Proposition 2 (with Eq. 12's typo fixed: P[i, j] summed over i). Non-positive arguments are skipped."""
        counts = torch.bincount(self.labels, minlength=self.C).double()
        arg = self.gb[self.labels] + counts[self.labels] / self.B
        ok = arg > 0
        if not ok.any():
            return math.nan, int((~ok).sum())
        return float(-torch.log(arg[ok]).mean()), int((~ok).sum())

    def G(self, Z: torch.Tensor) -> torch.Tensor:
        return (torch.softmax(Z, dim=1) - self.Y) / self.B

    def residuals(self, Z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Proposition 1 and Eq. 3 residuals (exact identities: zero at the true logits)."""
        G = self.G(Z) if self.differentiate_g else self.G(Z).detach()
        return self.target - G.T @ (Z - self.b), self.gb - G.sum(0)

    def losses(self, Z: torch.Tensor) -> dict[str, torch.Tensor]:
        rw, rb = self.residuals(Z)
        sw, sb, sl = self.scales
        out = {"L_w": ((sw * rw) ** 2).sum(), "L_b": ((sb * rb) ** 2).sum()}
        out["L_loss"] = (sl * (F.cross_entropy(Z, self.labels) - self.l_hat)) ** 2 if math.isfinite(self.l_hat) else Z.sum() * 0
        a1, a2, a3 = self.weights
        out["total"] = a1 * out["L_w"] + a2 * out["L_b"] + a3 * out["L_loss"]
        return out

    def residual_vector(self, Z: torch.Tensor, with_loss: bool) -> torch.Tensor:
        """The stacked residuals whose squared norm is L_total (``with_loss``) or alpha1 L_w + alpha2 L_b."""
        a1, a2, a3 = self.weights
        sw, sb, sl = self.scales
        rw, rb = self.residuals(Z)
        parts = [sw * math.sqrt(a1) * rw.reshape(-1), sb * math.sqrt(a2) * rb]
        if with_loss and math.isfinite(self.l_hat):
            parts.append(sl * math.sqrt(a3) * (F.cross_entropy(Z, self.labels) - self.l_hat).reshape(1))
        return torch.cat(parts)

    def jacobian(self, Z: torch.Tensor, with_loss: bool) -> torch.Tensor:
        """d residual_vector / d vec(Z), analytically (vmap'd autograd is 100x slower here).
        With S = softmax(Z), A = Z - 1 b^T and J_i = (diag(s_i) - s_i s_i^T) / B:
        d r_w[j,k] / d Z[i,l] = -(J_i[j,l] A[i,k] + G[i,j] delta_kl);  d r_b[j] / d Z[i,l] = -J_i[j,l];
        d CE / d Z[i,l] = G[i,l]."""
        a1, a2, a3 = self.weights
        S = torch.softmax(Z, dim=1)
        G = (S - self.Y) / self.B
        A = Z - self.b
        Ji = (torch.diag_embed(S) - S.unsqueeze(2) * S.unsqueeze(1)) / self.B  # [B, C(j), C(l)]
        eye = torch.eye(self.C, dtype=Z.dtype, device=Z.device)
        if self.differentiate_g:
            jw = -(torch.einsum("ijl,ik->jkil", Ji, A) + torch.einsum("ij,kl->jkil", G, eye))
            jb = -Ji.permute(1, 0, 2)
        else:  # G' held constant (the official code): only the (Z - 1 b^T) factor moves, L_b has no gradient
            jw = -torch.einsum("ij,kl->jkil", G, eye)
            jb = torch.zeros(self.C, self.B, self.C, dtype=Z.dtype, device=Z.device)
        sw, sb, sl = self.scales
        rows = [sw * math.sqrt(a1) * jw.reshape(self.C * self.C, -1), sb * math.sqrt(a2) * jb.reshape(self.C, -1)]
        if with_loss and math.isfinite(self.l_hat):
            rows.append(sl * math.sqrt(a3) * G.reshape(1, -1))
        return torch.cat(rows)

    def lm_step(self, Z: torch.Tensor, mu: float, with_loss: bool) -> tuple[torch.Tensor, float, float, float]:
        """One Levenberg-Marquardt step (Marquardt's diagonal scaling): returns (Z, mu, cost before, cost after); Z moves only when
        the cost falls, mu grows x10 on a rejected step and shrinks x10 on an accepted one."""
        z = Z.detach().double()
        r = self.residual_vector(z, with_loss)
        cost = float(r @ r)
        J = self.jacobian(z, with_loss)
        JtJ, Jtr = J.T @ J, J.T @ r
        damp = torch.diag(JtJ.diagonal().clamp_min(1e-30))
        for _ in range(8):
            try:
                step = torch.linalg.solve(JtJ + mu * damp, -Jtr)
            except RuntimeError:  # singular at this damping: damp more
                mu *= 10
                continue
            cand = z + step.reshape(z.shape)
            rc = self.residual_vector(cand, with_loss)
            new = float(rc @ rc)
            if new < cost:
                return cand, max(mu / 10, 1e-12), cost, new
            mu *= 10
        return z, min(mu, 1e12), cost, cost

    def features(self, Z: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Eq. 5, f' = pinv(G'^T) gW, with the audit signals that need no ground truth."""
        G = self.G(Z.detach().double())
        f = torch.linalg.pinv(G.T) @ self.gW
        sv = torch.linalg.svdvals(G)
        rw, rb = self.residuals(Z.detach().double())
        return f, {
            "condition_number": float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf,
            "rank": int(torch.linalg.matrix_rank(G)),
            "projection_residual": float((self.gW - G.T @ f).norm() / self.gW.norm().clamp_min(1e-300)),
            "L_w_relative": float(rw.norm() / self.target.norm().clamp_min(1e-300)),
            "L_b_relative": float(rb.norm() / self.gb.norm().clamp_min(1e-300)),
        }
