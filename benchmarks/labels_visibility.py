"""How much of a trained model's FedSGD batch the update can show at all: per-sample residuals and the accuracy an
oracle that resolves every visible sample would reach (issue: label recovery on trained models).

    .venv/bin/python -m benchmarks.labels_visibility      # about 10 minutes on 2 CPU cores

Every sample n of a FedSGD batch enters the update (every layer's gradient) through its residual p_n - e_y, whose size
``rho_n = 1 - p_n[y_n]`` is how strongly, relative to a misclassified sample, the update can show it. A sample the
model is sure of (rho ~ 0) leaves almost nothing, whatever the method. This benchmark measures rho on the same
trained models and the same batches as ``benchmarks.labels`` (its split, training and seeds; the client's forward
with BatchNorm in train mode, as the capture computes it) and, for random batches, the InsAcc of an oracle that
knows the label of every sample with rho >= tau and guesses the others' classes optimally from the pool's class
frequencies among such samples (the guess maximising the expected overlap of a multinomial, greedily). For tau = 1e-2
this oracle needs a method to resolve a sample whose gradient is a hundredth of a misclassified one's; it is not
a bound on methods that read smaller residuals, it says how much of the batch is within reach at that resolution.
A second oracle, for random batches, is given each present class's exact error mass (the sum of its samples' rho,
what a perfect split of the update by class would show) and the exact prior, and reads the counts as the MAP
estimate: how far per-class error masses can take a method that counts from them (the output bias gradient that
RLU and bias-count read is the sum of these classes' residual vectors, a mix of the same masses). The best stored method and ``auto`` on
the same batches come from ``benchmarks/results/labels.json``.
Writes OUT/labels_visibility.json and OUT/labels_visibility.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from pathlib import Path

import torch

from benchmarks.common import RESULTS, write_results
from benchmarks.labels import FEDSGD_MODELS, GRADIENT_MODELS, accuracy, batch_indices, data, make_model, train
from fedaudit.models.normalize import normalize

TAUS = (1e-1, 1e-2, 1e-3, 1e-4)
SIZES = (8, 16, 32, 64)
DISTS = ["random", "repeated", "single"]  # benchmarks.labels' order: its seeds depend on the index


def oracle_guess(m: int, q: list[float]) -> torch.Tensor:
    """The count vector of m samples maximising E[sum_c min(g_c, u_c)] for u ~ Multinomial(m, q). The objective is
    a sum of concave functions of each g_c (adding one to g_c gains P(u_c > g_c)), so the greedy choice is optimal."""
    g = [0] * len(q)

    def gain(c: int) -> float:
        k = g[c]
        return 1.0 - sum(math.comb(m, i) * q[c] ** i * (1 - q[c]) ** (m - i) for i in range(k + 1))

    for _ in range(m):
        c = max(range(len(q)), key=gain)
        g[c] += 1
    return torch.tensor(g)


def mass_oracle(mass: torch.Tensor, present: torch.Tensor, b: int, pool_rho: torch.Tensor, pool_y: torch.Tensor,
                gen: torch.Generator, draws: int = 2000) -> torch.Tensor:
    """The counts an oracle reads from each present class's exact error mass ``mass[c]`` (the sum of its samples'
    rho: what a perfect split of the update by class would give) with the exact prior: MAP of
    sum_c [log P(mass_c | n_c) + n_c log q_c - log n_c!] subject to sum n = b, P(mass | n) the density of the sum of n
    draws from class c's rho in the pool (Monte Carlo, a Gaussian kernel on log(mass)); absent classes get 0."""
    classes = len(mass)
    q = torch.bincount(pool_y, minlength=classes).double() / len(pool_y)
    score = torch.full((classes, b + 1), -math.inf, dtype=torch.float64)
    for c in range(classes):
        if not present[c]:
            score[c, 0] = 0.0
            continue
        pool = pool_rho[pool_y == c].double()
        target = math.log(float(mass[c]) + 1e-6)
        for k in range(1, b + 1):
            sums = torch.log(pool[torch.randint(len(pool), (draws, k), generator=gen)].sum(1) + 1e-6)
            h = 1.06 * float(sums.std().clamp_min(0.05)) * draws ** -0.2
            dens = torch.logsumexp(-0.5 * ((sums - target) / h) ** 2, 0) - math.log(draws * h * math.sqrt(2 * math.pi))
            score[c, k] = float(dens) + k * math.log(float(q[c])) - math.lgamma(k + 1)
    best = torch.full((b + 1,), -math.inf, dtype=torch.float64)
    best[0] = 0.0
    choice = []
    for c in range(classes):  # dynamic programme over classes: best[t] = best score of the classes so far summing to t
        new, arg = torch.full_like(best, -math.inf), torch.zeros(b + 1, dtype=torch.long)
        for total in range(b + 1):
            cand = best[: total + 1].flip(0) + score[c, : total + 1]
            arg[total] = int(torch.argmax(cand))
            new[total] = cand[arg[total]]
        best = new
        choice.append(arg)
    counts, total = torch.zeros(classes, dtype=torch.long), b
    for c in reversed(range(classes)):
        counts[c] = choice[c][total]
        total -= int(counts[c])
    return counts


def pool_residuals(net, spec, x: torch.Tensor, y: torch.Tensor, b: int, train_bn: bool) -> torch.Tensor:
    """rho of every pool sample inside random batches of b (the client's forward, as for the victims)."""
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(b))
    out = torch.empty(len(y), dtype=torch.float32)
    for i in range(0, len(y) - b + 1, b):
        sel = perm[i:i + b]
        out[sel] = residuals(net, spec, x[sel], y[sel], train_bn)
    rest = perm[(len(y) // b) * b:]
    if len(rest):
        out[rest] = residuals(net, spec, x[rest], y[rest], train_bn and len(rest) > 1)
    return out


def residuals(net, spec, x: torch.Tensor, y: torch.Tensor, train_bn: bool) -> torch.Tensor:
    """rho_n = 1 - p_n[y_n] from the client's forward (BatchNorm in train mode normalises with the batch; on a copy,
    as the capture does, so the model's running statistics stay as trained)."""
    with torch.no_grad():
        p = torch.softmax(copy.deepcopy(net).train(train_bn)(normalize(x, spec)), 1)
    return 1 - p[torch.arange(len(y)), y]


def stored_scores(path: Path) -> dict:
    """{(model, dist, B): (best single method's mean InsAcc, its name, auto's)} over the stored trained rows."""
    if not path.exists():
        return {}
    rows = [r for r in json.loads(path.read_text())["rows"] if r["state"] == "trained"]
    out = {}
    for key in {(r["model"], r["dist"], r["B"]) for r in rows}:
        cell = [r["results"] for r in rows if (r["model"], r["dist"], r["B"]) == key]
        names = [n for n in cell[0] if not n.startswith("auto")]
        means = {n: sum(c[n]["InsAcc"] for c in cell) / len(cell) for n in names}
        best = max(means, key=means.get)
        out[key] = (means[best], best, sum(c["auto"]["InsAcc"] for c in cell) / len(cell))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    train_xy, _, (px, py) = data()
    epoch_scale = round(3500 / len(train_xy[1]))
    stored = stored_scores(args.out / "labels.json")
    rows = []
    for label, arch, kwargs, _, epochs in (FEDSGD_MODELS[k] for k in GRADIENT_MODELS):
        spec, init_model = make_model(arch, kwargs)
        net = train(init_model, spec, train_xy, epochs * epoch_scale)
        train_bn, acc = arch != "lenet", accuracy(net, spec, (px, py))
        pool_rho = residuals(net, spec, px, py, False)  # the prior's class frequencies (eval mode, whole pool)
        for dist in DISTS:
            for b in SIZES:
                g = torch.Generator().manual_seed(1000 * b + DISTS.index(dist))
                rho, oracle, masses = [], {tau: [] for tau in TAUS}, []
                if dist == "random":
                    batch_rho, mass_gen = pool_residuals(net, spec, px, py, b, train_bn), torch.Generator().manual_seed(b)
                for _ in range(args.trials):
                    idx = batch_indices(py, b, dist, g)
                    r, y = residuals(net, spec, px[idx], py[idx], train_bn), py[idx]
                    rho.append(r)
                    if dist != "random":
                        continue
                    mass = torch.zeros(10).index_add_(0, y, r.float())
                    present = torch.bincount(y, minlength=10) > 0
                    guess = mass_oracle(mass, present, b, batch_rho, py, mass_gen)
                    masses.append(int(torch.minimum(guess, torch.bincount(y, minlength=10)).sum()) / b)
                    for tau in TAUS:
                        seen = r >= tau
                        q = torch.bincount(py[pool_rho < tau], minlength=10).double()
                        q = (q / q.sum()).tolist() if q.sum() > 0 else [0.1] * 10
                        hidden = torch.bincount(y[~seen], minlength=10)
                        guess = oracle_guess(int((~seen).sum()), q)
                        oracle[tau].append((int(seen.sum()) + int(torch.minimum(guess, hidden).sum())) / b)
                allr = torch.cat(rho)
                best = stored.get((label, dist, b))
                rows.append({"model": label, "acc": acc, "dist": dist, "B": b,
                             "visible": {str(t): float((allr >= t).float().mean()) for t in TAUS},
                             "median_rho": float(allr.median()),
                             "oracle": {str(t): sum(v) / len(v) for t, v in oracle.items() if v},
                             "mass_oracle": sum(masses) / len(masses) if masses else None,
                             "best": best[0] if best else None, "best_method": best[1] if best else None,
                             "auto": best[2] if best else None})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    write_results(args.out, "labels_visibility", rows, markdown(rows))
    return 0


def markdown(rows: list[dict]) -> str:
    pct = lambda v: "-" if v is None else f"{100 * v:.0f}"  # noqa: E731
    lines = ["Trained models (benchmarks.labels' training and batches), FedSGD. visible(tau): share of the batches' "
             "samples with rho = 1 - p[y] >= tau. oracle(tau), random batches: InsAcc of knowing every visible "
             "sample's label and guessing the rest optimally. best / auto: the stored labels.json on the same "
             "batches. class-mass oracle, random batches: the counts read from each present class's exact error mass (sum "
             "of its samples' rho) with the exact prior (mass_oracle). All in %.", "",
             "| model | acc | batch | B | median rho | " + " | ".join(f"visible({t:g})" for t in TAUS) + " | "
             + " | ".join(f"oracle({t:g})" for t in TAUS) + " | class-mass oracle | best method | auto |",
             "|---|---|---|---|---|" + "---|" * (2 * len(TAUS)) + "---|---|---|"]
    for r in rows:
        best = "-" if r["best"] is None else f"{pct(r['best'])} ({r['best_method']})"
        lines.append(f"| {r['model']} | {pct(r['acc'])} | {r['dist']} | {r['B']} | {r['median_rho']:.1e} | "
                     + " | ".join(pct(r["visible"][str(t)]) for t in TAUS) + " | "
                     + " | ".join(pct(r["oracle"].get(str(t))) for t in TAUS)
                     + f" | {pct(r['mass_oracle'])} | {best} | {pct(r['auto'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
