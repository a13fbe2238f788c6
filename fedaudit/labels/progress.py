"""How far along its local training a client is at each step, measured on simulated clients.

A FedAvg delta reveals where the client ended (theta_K = theta_0 + Delta) but not when it got there. The constant-
gradient assumption (fedaudit.conversion.path_fractions: k / K for plain SGD) puts step k's model k / K of the way
along Delta. Real clients move fastest in their first steps (at random init the output layer learns the client's
class mix within a few steps, after which the gradient shrinks), so step k's model is further along than k / K.
``simulated_progress`` measures the profile on clients simulated on auxiliary images: K SGD steps (the update's
lr, momentum, weight decay and batch size) on batches whose classes are drawn from the current label estimate, and,
for each step, the simulated displacement d_k projected on the simulated whole change d_K:
f_k = <d_k, d_K> / |d_K|^2. The real direction Delta is kept; only the timing comes from the simulation
(docs/methods/labels.md, "RLU").
"""

from __future__ import annotations

import copy

import torch

from fedaudit.client.local_sgd import local_sgd
from fedaudit.conversion import momentum_weights, optimizer_terms, path_fractions
from fedaudit.threat_model import ThreatModel


def draw_by_class(pools: list[torch.Tensor], classes: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One index per entry of ``classes``, drawn uniformly (with replacement) from that class's pool of indices."""
    return torch.stack([pools[c][int(torch.randint(len(pools[c]), (1,), generator=gen, device="cpu"))] for c in classes.tolist()])


def _uploaded(tm: ThreatModel, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters the update carries (withheld ones do not move on the path), detached copies."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if n in tm.gradient}


def _replay(tm: ThreatModel, batches: list, seed: int, lr: float, momentum: float, wd: float, normalized: bool,
            before_step=None) -> torch.nn.Module:
    """A simulated client trained on ``batches``; dropout (a model in train mode) draws the same masks each replay."""
    device = tm.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        return local_sgd(copy.deepcopy(tm.model).train(tm.train_bn), tm.spec, batches, lr, momentum, wd, normalized,
                         before_step)


def _client_progress(tm: ThreatModel, batches: list, seed: int, lr: float, momentum: float, wd: float,
                     normalized: bool) -> torch.Tensor | None:
    """f_k of one simulated client (None if it did not move). Run twice on the same batches: first for d_K, then
    for the projections, so only one model's copy is held at a time."""
    start = _uploaded(tm, tm.model)
    end = _uploaded(tm, _replay(tm, batches, seed, lr, momentum, wd, normalized))
    change = {n: (end[n] - start[n]).double() for n in start}
    norm2 = sum(float((d ** 2).sum()) for d in change.values())
    if norm2 <= 0:
        return None
    reached = torch.zeros(len(batches), dtype=torch.float64, device="cpu")

    def project(k: int, model: torch.nn.Module) -> None:
        params = dict(model.named_parameters())
        reached[k] = sum(float(((params[n].detach() - start[n]).double() * change[n]).sum()) for n in change)

    _replay(tm, batches, seed, lr, momentum, wd, normalized, project)
    return reached / norm2


def _class_mix(pools: list[torch.Tensor], shares: torch.Tensor) -> torch.Tensor:
    """The simulated batches' class weights: ``shares``, clipped at 0, on the classes with aux images (all of those
    evenly where the shares leave none)."""
    q = torch.tensor([float(shares[c]) if len(p) else 0.0 for c, p in enumerate(pools)], dtype=torch.float64,
                     device="cpu").clamp_min(0)
    if q.sum() <= 0:
        q = torch.tensor([1.0 if len(p) else 0.0 for p in pools], dtype=torch.float64, device="cpu")
    return q


def _simulated_clients(tm: ThreatModel, images: torch.Tensor, pools: list[torch.Tensor], q: torch.Tensor,
                       simulations: int, gen: torch.Generator):
    """Each simulated client's K batches of B aux images (classes drawn from ``q``, with replacement) and its seed."""
    steps, b = tm.meta.local_steps, tm.batch_size or 1
    device = tm.device
    for _ in range(simulations):
        classes = torch.multinomial(q, steps * b, replacement=True, generator=gen)
        idx = draw_by_class(pools, classes, gen)
        batches = [(images[idx[k * b:(k + 1) * b]].to(device), classes[k * b:(k + 1) * b].to(device)) for k in range(steps)]
        yield batches, int(torch.randint(2**62, (1,), generator=gen, device="cpu"))


def simulated_progress(tm: ThreatModel, images: torch.Tensor, labels: torch.Tensor, shares: torch.Tensor,
                       simulations: int, gen: torch.Generator, normalized: bool = False) -> list[float]:
    """f_k for k = 0..K-1, the mean over ``simulations`` clients, clipped to [0, 1] (the constant-gradient
    fractions where nothing can be simulated: one step, no learning rate, a client that does not move).

    ``images``/``labels``: labelled aux data; ``shares`` [C]: the class mix the simulated batches are drawn from
    (with replacement; classes without aux images are left out)."""
    steps = tm.meta.local_steps
    momentum, wd = optimizer_terms(tm.meta)
    lr = float(tm.meta.local_lr or 0.0)
    fallback = path_fractions(steps, momentum)
    pools = [torch.nonzero(labels == c).flatten() for c in range(tm.spec.num_classes)]
    q = _class_mix(pools, shares)
    if steps == 1 or lr <= 0 or q.sum() <= 0:
        return fallback
    runs = []
    for batches, seed in _simulated_clients(tm, images, pools, q, simulations, gen):
        f = _client_progress(tm, batches, seed, lr, momentum, wd, normalized)
        if f is not None:
            runs.append(f)
    if not runs:
        return fallback
    return torch.stack(runs).mean(0).clamp(0.0, 1.0).tolist()


def simulated_confidence(tm: ThreatModel, images: torch.Tensor, labels: torch.Tensor, shares: torch.Tensor,
                         simulations: int, gen: torch.Generator, confidence, normalized: bool = False) -> torch.Tensor:
    """S_bar along the simulated clients' own paths: ``simulations`` clients as in :func:`simulated_progress`, each
    step's S (``confidence(model)`` at the model the step's gradient is taken at) weighted by the momentum weights
    and averaged over the clients. Unlike the progress fractions, the path itself is the simulation's, not the
    straight line to the client's final model (RLU ``--trajectory replay``)."""
    momentum, wd = optimizer_terms(tm.meta)
    lr = float(tm.meta.local_lr or 0.0)
    weights = torch.tensor(momentum_weights(tm.meta.local_steps, momentum), dtype=torch.float64, device="cpu")
    weights = weights / weights.sum()
    pools = [torch.nonzero(labels == c).flatten() for c in range(tm.spec.num_classes)]
    total = None
    for batches, seed in _simulated_clients(tm, images, pools, _class_mix(pools, shares), simulations, gen):
        per_step: list[torch.Tensor] = []

        def record(k: int, model: torch.nn.Module, per_step: list[torch.Tensor] = per_step) -> None:
            per_step.append(weights[k] * confidence(copy.deepcopy(model)))  # a copy: the aux forward leaves it as it was

        _replay(tm, batches, seed, lr, momentum, wd, normalized, record)
        s = torch.stack(per_step).sum(0)
        total = s if total is None else total + s
    assert total is not None
    return total / simulations
