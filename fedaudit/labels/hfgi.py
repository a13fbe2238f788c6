"""HFGI Stage I (Ye et al., AAAI 2024): coarse label set, then counts by a CV-guided evolutionary search.

* Coarse set (Sec. 2.1): classes whose output-weight-gradient row has a negative mean.
* CV model (eqs. 5-6, code form): sort each aux feature vector (input of the output layer) ascending; h_bar and
  CV = std/mean (unbiased std) per sorted position; t = the M positions with the lowest CV. The fitness of a count
  vector v is one cosine between concat_c(v_c * h_bar[t]) and concat_c(sort(|G[c, :]|)[t]).
* Evolution (steps 1-4): population 20, 200 generations, uniform crossover p_r = 0.5 with a random partner
  (possibly itself), a +-1 mutation, the child replaces its parent only if strictly fitter. Every operator is
  followed by Rs (scale to sum N, floor with minimum 1, last entry takes the rest) and a repair step.
Guards for the official code's bugs (docs/methods/labels.md): nc = 1 gets all N; nc = N gets ones; nc = 0
falls back to the N lowest row means' classes; nc > N keeps the N most negative classes; Phi3 can no longer
drive the last entry <= 0; the mutation never breaks the sum; the search is seeded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedaudit.labels.base import LabelMethod, LabelResult, samples_in_update
from fedaudit.labels.features import aux_stats
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.requirements import BATCH_SIZE, FINAL_WEIGHT_GRAD
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def rescale(v: np.ndarray, total: int) -> np.ndarray:
    """Rs = Phi3 o Phi2 o Phi1, plus a repair so every entry is >= 1 and the sum is exactly ``total``."""
    v = np.asarray(v, dtype=np.float64)
    v = v * total / max(v.sum(), 1e-12)  # Phi1
    v = np.maximum(np.floor(v), 1).astype(np.int64)  # Phi2
    v[-1] = total - v[:-1].sum()  # Phi3
    while v[-1] < 1:  # repair: take from the largest entries
        i = int(np.argmax(v[:-1]))
        v[i] -= 1
        v[-1] += 1
    return v


def mutate(v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    w = v.copy()
    donors = [i for i in rng.permutation(len(w)) if w[i] > 1]
    if not donors:
        return w  # all ones: nothing to move (the official code would break the sum here)
    i = donors[0]
    j = rng.choice([k for k in range(len(w)) if k != i])
    w[i] -= 1
    w[j] += 1
    return w


def fitness(v: np.ndarray, hbar_t: np.ndarray, s_t: np.ndarray) -> float:
    model = (v[:, None] * hbar_t[None, :]).ravel()
    target = s_t.ravel()
    return float(model @ target / (np.linalg.norm(model) * np.linalg.norm(target) + 1e-300))


def evolve(nc: int, total: int, hbar_t, s_t, rng, population=20, generations=200, p_r=0.5) -> tuple[np.ndarray, float]:
    pop = [rescale(rng.integers(1, total - nc + 2, size=nc), total) for _ in range(population)]
    fit = [fitness(v, hbar_t, s_t) for v in pop]
    for _ in range(generations):
        partners = rng.permutation(population)
        for i in range(population):
            mask = rng.random(nc) < p_r
            child = mutate(rescale(np.where(mask, pop[i], pop[partners[i]]), total), rng)
            f = fitness(child, hbar_t, s_t)
            if f > fit[i]:  # ties keep the parent
                pop[i], fit[i] = child, f
    best = int(np.argmax(fit))
    return pop[best], fit[best]


@LABEL_METHODS.register
class HFGI(LabelMethod):
    name = "hfgi"
    rules_rank = (4, 1)
    summary = "negative row means give the classes; a CV-guided evolutionary search gives their counts"
    paper = "Ye et al. 2024, HFGI (AAAI), Stage I"
    requires = (FINAL_WEIGHT_GRAD, BATCH_SIZE)
    aux = "optional"
    options = (
        MethodOption("positions", int, 20, "M: sorted feature positions with the lowest CV"),
        MethodOption("population", int, 20, "individuals"),
        MethodOption("generations", int, 200, "generations"),
        MethodOption("crossover", float, 0.5, "p_r: probability of keeping the parent's entry"),
    )

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        n, c = samples_in_update(tm), tm.spec.num_classes
        g = tm.output_grad("weight").double().flatten(1).cpu()
        row_mean = g.mean(1)
        present = torch.nonzero(row_mean < 0).flatten()
        warnings = []
        if len(present) == 0:
            present = torch.argsort(row_mean, stable=True)[:1]
            warnings.append("no class has a negative row mean (confident head?); using the lowest one")
        if len(present) > n:
            present = present[torch.argsort(row_mean[present], stable=True)[:n]].sort().values
            warnings.append(f"{len(present)} negative classes for {n} samples; kept the {n} most negative")
        nc = len(present)
        diag: dict[str, Any] = {"coarse_set": present.tolist()}
        if nc == 1 or nc == n:
            v, fit = np.full(nc, n // nc, dtype=np.int64), None
        else:
            aux = self.aux_of(session)
            h, _ = aux_stats(tm, aux)
            hs = torch.sort(h, dim=1).values
            mean = hs.mean(0)
            cv = hs.std(0, unbiased=True) / mean.clamp_min(1e-12)
            t = torch.argsort(cv, stable=True)[: self.opt("positions")]
            s = torch.sort(g[present].abs(), dim=1).values
            rng = np.random.default_rng(session.seed)
            v, fit = evolve(nc, n, mean[t].numpy(), s[:, t].numpy(), rng, self.opt("population"),
                            self.opt("generations"), self.opt("crossover"))
            diag.update(positions=t.tolist(), aux=aux.kind)
        counts = torch.zeros(c, dtype=torch.long, device="cpu")
        counts[present] = torch.from_numpy(np.asarray(v, dtype=np.int64))
        result = LabelResult(counts.double(), counts, {**diag, "fitness": fit})
        result.warnings += warnings
        return result
