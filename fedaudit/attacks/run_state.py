"""What the optimisation loop and its batched-restart form share: the run's settings (LoopConfig), its result
(LoopResult), the best restart so far, the progress bar and the checks on an iterate (fedaudit/attacks/loop.py,
fedaudit/attacks/batched_restarts.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from rich.progress import Progress

from fedaudit.attacks.base import OptimizationAttack
from fedaudit.progress import LineProgress, progress_display

BARELY_MOVED = 0.05  # mean |pixel change| (on [0,1]) below which a run "barely moved from its initialisation"


@dataclass
class LoopConfig:
    iterations: int
    restarts: int = 1
    lr: float = 0.1
    schedule: str = "step"
    seed: int = 0
    checkpoint_every: int = 0
    checkpoint_path: Path | None = None
    resume: Path | None = None
    quiet: bool = False
    fingerprint: str = ""  # attack + options + update hash; a checkpoint only resumes the same run
    monitor: Callable[[OptimizationAttack, dict, int, int], bool | None] | None = None
    monitor_every: int = 0
    restart_batch: int = 0  # restarts per stacked batch: 0 = all at once (halved while memory runs out), 1 = sequential
    cuda_graph: str = "auto"  # capture the iteration as a CUDA graph: auto | on | off (fedaudit/attacks/cuda_graph.py)
    progress: str = "auto"  # auto | bar | lines | off (fedaudit/progress.py)
    runs_after: int = 0  # runs of the same attack that follow this one (a run's proxies): the prediction counts them


@dataclass
class LoopResult:
    images: torch.Tensor
    labels: list[int]
    distance: float
    best_restart: int
    iterations_run: int
    interrupted: bool = False
    diverged_restarts: list[int] = field(default_factory=list)
    history: list[tuple[int, int, float]] = field(default_factory=list)  # (restart, iteration, loss)
    seconds: float = 0.0
    resumed_from: dict | None = None
    extras: dict = field(default_factory=dict)  # the attack's extras() for the best restart
    movement: float | None = None  # mean |pixel change| of the best restart's images from their initialisation
    # every finished restart's final images (restart index -> images): the truth-free restart agreement
    # (fedaudit/verdict/reconstruction.py) compares them; restarts before a resume are not kept
    restart_images: dict[int, torch.Tensor] = field(default_factory=dict)
    restart_batches: list[int] = field(default_factory=list)  # sizes of the stacked restart batches run; [] = sequential
    restarts_one_by_one: str | None = None  # why several restarts ran one after another (batched_restarts.why_not)
    cuda_graph: dict | None = None  # whether the iteration ran as a captured CUDA graph, and why not (cuda_graph.py)

    @property
    def barely_moved(self) -> bool:
        return self.movement is not None and self.movement < BARELY_MOVED


@dataclass
class Best:
    distance: float = math.inf
    images: torch.Tensor | None = None
    labels: list[int] | None = None
    restart: int = -1
    state: dict = field(default_factory=dict)  # the best restart's variables (extras() is computed from them)
    movement: float | None = None


def check_built_for(attack: OptimizationAttack, cfg: LoopConfig) -> None:
    """The loop runs the budget the attack was built for (its schedules are relative to it); the job builds both from
    one set of settings, so a difference is a programming error, not bad input."""
    if attack.iterations != cfg.iterations:
        raise ValueError(f"{attack.name} was built for {attack.iterations} iterations, the loop was given "
                         f"{cfg.iterations}: build the attack with the run's budget (ReconstructJob.build)")


def progress_bar(quiet: bool, mode: str = "auto") -> Progress | LineProgress:
    """The run's progress on stderr: a bar on a terminal, plain lines elsewhere (fedaudit/progress.py)."""
    return progress_display(quiet, mode)


def restart_generator(seed: int, restart: int) -> torch.Generator:
    """The generator a restart's initial state is drawn from (the same for sequential and stacked restarts)."""
    return torch.Generator().manual_seed(seed * 10_007 + restart)


def initial_images(attack: OptimizationAttack, seed: int, restart: int) -> torch.Tensor | None:
    """The images restart ``restart`` started from (drawn again: the identification metric's initialisation null)."""
    return start_images(attack, attack.init_state(restart_generator(seed, restart)))


def start_images(attack: OptimizationAttack, state) -> torch.Tensor | None:
    """The images a run starts from, to measure how far it moved; None for a closed form, which starts nowhere."""
    return None if attack.closed_form else images_or_none(attack, state)


def images_or_none(attack: OptimizationAttack, state) -> torch.Tensor | None:
    images = attack.images(state).detach()
    return images.clone() if images.numel() else None


def pixel_change(images: torch.Tensor, start: torch.Tensor | None) -> float | None:
    if start is None or images.shape != start.shape or not images.numel():
        return None
    return float((images.detach() - start.to(images.device)).abs().mean())


def finite(state) -> bool:
    return all(torch.isfinite(v).all() for v in state.values())


def score_restart(attack: OptimizationAttack, state: dict, restart: int, start_images: torch.Tensor | None, best: Best,
                  finals: dict[int, torch.Tensor]) -> Best:
    """Score a finished restart by the attack's gradient distance (never the truth): keep its final images in
    ``finals`` (the restart agreement compares them) and return the better of it and ``best``."""
    d = attack.distance(state)
    final = images_or_none(attack, state)
    if final is not None and math.isfinite(d):
        finals[restart] = final.cpu()
    if math.isfinite(d) and d < best.distance:
        images = attack.images(state)
        return Best(d, images, attack.recovered_labels(state), restart, {k: v.detach().clone() for k, v in state.items()},
                    pixel_change(images, start_images))
    return best
