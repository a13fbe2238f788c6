"""What an optimisation attack plugs into the shared loop: its variables, objective, step rule and projection."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from fedaudit.attacks import bn_prior
from fedaudit.attacks.engine import GradientEngine
from fedaudit.errors import InputError
from fedaudit.methods import Method, MethodOption
from fedaudit.threat_model import ThreatModel


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic TV, mean |dx| + mean |dy| (breaching's convention for Inverting Gradients)."""
    return (x[..., :, 1:] - x[..., :, :-1]).abs().mean() + (x[..., 1:, :] - x[..., :-1, :]).abs().mean()


def total_variation_rows(x: torch.Tensor) -> torch.Tensor:
    """[R]: ``total_variation(x[r])`` for each restart of a stacked [R, B, C, H, W] batch."""
    return (x[..., :, 1:] - x[..., :, :-1]).abs().flatten(1).mean(1) + (x[..., 1:, :] - x[..., :-1, :]).abs().flatten(1).mean(1)


def patch_seams_rows(x: torch.Tensor, patch: int) -> torch.Tensor:
    """GradViT's patch prior (Hatamizadeh et al. 2022): the mean squared jump across the seams between a vision
    transformer's ``patch`` x ``patch`` patches, for each leading row of ``x`` [..., C, H, W] (rows: restarts, or one).
    A ViT's patches meet only through attention and the position embedding, so matching can place each patch well
    and still leave seams; this penalises them (the paper's exact form is not public; docs/methods/attacks.md)."""
    h, w = x.shape[-2:]
    across = [x[..., :, k * patch - 1, :] - x[..., :, k * patch, :] for k in range(1, h // patch)]
    down = [x[..., :, :, k * patch - 1] - x[..., :, :, k * patch] for k in range(1, w // patch)]
    seams = torch.stack(across + down, dim=-2)  # [..., B, C, seams, length]
    return seams.pow(2).flatten(-3).mean(-1).mean(-1)  # per image, then over the batch: [R], or a scalar


def patch_size(tm) -> int:
    """The patch size of a vision transformer (its patch embedding's kernel), for ``--patch-prior``."""
    from fedaudit.errors import InputError

    for name in ("patch_embed", "patch_embed.proj", "conv_proj"):
        module = dict(tm.model.named_modules()).get(name)
        if isinstance(module, torch.nn.Conv2d):
            return int(module.kernel_size[0])
    raise InputError("--patch-prior needs a vision transformer (a patch_embed or conv_proj patch embedding)")


SCHEDULES = ("step", "step-0.33", "cosine", "warmup-cosine", "none")
WARMUP = 50  # warmup-cosine: GradInversion's 50 linear warm-up iterations (at most a tenth of the run)

# The loop settings every optimisation attack takes (defaults per attack in ``defaults``), in the one syntax of
# method options: CLI flags and ``--attack-options`` specs are converted and checked by the same code.
LOOP_OPTIONS = (
    MethodOption("iterations", int, None, "Iterations per restart.", positive=True),
    MethodOption("restarts", int, None, "Restarts; the best by gradient distance is kept.", positive=True),
    MethodOption("lr", float, None, "Step size.", positive=True),
    MethodOption("schedule", str, None, "Learning-rate schedule: " + " | ".join(SCHEDULES) + ".", SCHEDULES),
    MethodOption("restart-batch", int, None, "Restarts optimised together as one stacked batch, where the attack "
                 "supports it: 0 = all where that is faster (CUDA; CPU models up to 1M parameters), halved while "
                 "memory runs out; 1 = one after another; N = batches of at most N. The --proxies runs stack the "
                 "same way (ig, hfgi), P x restarts rows."),
    MethodOption("cuda-graph", str, None, "Capture the attack iteration as a CUDA graph and replay it: auto = where the "
                 "attack allows it on a CUDA device (ig, fedleak); on = required (exit 2 where it cannot apply); off = "
                 "eager.", ("auto", "on", "off")),
)
LOOP_DEFAULTS = {"restart-batch": 0, "cuda-graph": "auto"}  # loop settings an attack's ``defaults`` need not repeat


def check_budget(iterations: int | None, restarts: int | None) -> None:
    """The one check of an attack budget (None: not given, the attack's default): every command that takes
    ``--iterations``/``--restarts`` refuses a count below 1 with the same line, before any work starts."""
    if iterations is not None and iterations < 1 or restarts is not None and restarts < 1:
        raise InputError("--iterations and --restarts must be >= 1")


def lr_factor(schedule: str, it: int, total: int) -> float:
    """Learning-rate multiplier at iteration ``it`` (a pure function, so resuming needs no scheduler state).
    ``step``: x0.1 at 3/8, 5/8 and 7/8 of the run (Inverting Gradients); ``step-0.33``: x0.33 at the same
    points (HFGI); ``cosine``; ``warmup-cosine``: linear warm-up over the first 50 iterations (a tenth of a
    shorter run), then cosine (GradInversion); ``none``."""
    if schedule in ("step", "step-0.33"):
        gamma = 0.1 if schedule == "step" else 0.33  # step-0.33: HFGI's MultiStepLR (gamma 0.33)
        return gamma ** sum(it >= round(total * f) for f in (3 / 8, 5 / 8, 7 / 8))
    if schedule == "cosine":
        return 0.5 * (1 + torch.cos(torch.tensor(torch.pi * it / max(total, 1), device="cpu")).item())
    if schedule == "warmup-cosine":
        warm = min(WARMUP, total // 10)
        if it < warm:
            return (it + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (it - warm) / max(total - warm, 1)))
    return 1.0


class OptimizationAttack(Method):
    """Subclasses set ``defaults`` (iterations, lr, schedule, restarts) and ``options``, and implement
    ``init_state``, ``closure`` and ``distance``. ``closure`` must leave the step direction in ``.grad``."""

    defaults: ClassVar[dict[str, Any]] = {"iterations": 1000, "lr": 0.1, "schedule": "step", "restarts": 1}
    optimizer_name: ClassVar[str] = "adam"
    # a closed form (APRIL): its images do not start anywhere, so there is no initialisation to have moved from (no
    # "barely moved" warning) and no initialisation null for the identification metric
    closed_form: ClassVar[bool] = False
    default_labels: ClassVar[str] = "auto"  # the label method used when --labels is not given
    # batched_closure also runs on stacked targets (several updates' rows in one batch: the proxies,
    # fedaudit/attacks/stacked_targets.py)
    stacks_targets: ClassVar[bool] = False

    def __init__(self, tm: ThreatModel, engine: GradientEngine, labels: torch.Tensor, options: dict[str, Any] | None,
                 num_images: int, iterations: int | None = None):
        self.tm, self.engine, self.opts = tm, engine, self.parse_options(options)
        # the BN-statistic prior, for attacks that declare --bn-stats (fedaudit/attacks/bn_prior.py)
        self.bn_targets: bn_prior.Targets | None = None
        self.bn_usage: dict[str, Any] = {"bn_stats": "not an option of this attack"}
        if "bn-stats" in self.opts:
            self.bn_targets, self.bn_usage = bn_prior.resolve(tm, self.opts["bn-stats"], engine.device, self.name)
        self.labels = labels.to(engine.device)
        self.num_images = num_images
        self.shape = (num_images, *tm.spec.input_shape)
        # the run's budget, fixed at construction (schedules relative to it: HFGI's stages, GradInversion's group
        # phase); the loop runs exactly this many and checks that it was told the same
        self.iterations = int(iterations if iterations is not None else self.defaults["iterations"])
        check_budget(self.iterations, None)

    def bn_inputs(self) -> list | None:
        """A list for the engine to fill with BN inputs when the prior is on, else None."""
        return [] if self.bn_targets else None

    def bn_term(self, captured: list | None, multipliers: tuple[float, ...] = ()) -> torch.Tensor | float:
        """``--bn`` times the BN-statistic prior on ``captured`` (0 when the prior is off)."""
        if not self.bn_targets or captured is None:
            return 0.0
        return self.opts["bn"] * bn_prior.bn_prior(captured, self.bn_targets, multipliers)

    def init_state(self, gen: torch.Generator) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def closure(self, state: dict[str, torch.Tensor], it: int) -> float:
        raise NotImplementedError

    def distance(self, state: dict[str, torch.Tensor]) -> float:
        """The score that picks the best restart: a gradient distance only (never the truth)."""
        raise NotImplementedError

    def why_not_batched(self) -> str | None:
        """Why this attack's restarts cannot run as one batch (None: they can; ``batched_closure`` is implemented).
        The loop then runs them one after another."""
        return "this attack runs its restarts one after another"

    def why_not_graphed(self) -> str | None:
        """Why this attack's iteration cannot be captured as a CUDA graph (None: it can). It can when the closure
        neither depends on the iteration number nor reads values back to the host (fedaudit/attacks/cuda_graph.py)."""
        return f"{self.name}'s iteration is not captured (it depends on the iteration or reads values on the host)"

    def batched_closure(self, state: dict[str, torch.Tensor], it: int) -> torch.Tensor:
        """``closure`` for R restarts stacked on a leading axis of every state tensor: leaves each restart's own
        step direction in ``.grad`` and returns the R losses."""
        raise NotImplementedError

    def project(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            state["x"].clamp_(0, 1)

    @classmethod
    def loop_settings(cls, given: dict[str, Any] | None = None) -> dict[str, Any]:
        """This attack's loop defaults updated with ``given`` (values or text; None means "not given")."""
        by_name = {o.name: o for o in LOOP_OPTIONS}
        out: dict[str, Any] = {k: cls.defaults.get(k, LOOP_DEFAULTS.get(k)) for k in by_name}
        for key, value in (given or {}).items():
            if value is None:
                continue
            if key not in by_name:
                raise InputError(f"{cls.name!r}: {key!r} is not a loop setting ({', '.join(by_name)})")
            out[key] = by_name[key].convert(value, cls.name)
        check_budget(out["iterations"], out["restarts"])
        if out["restart-batch"] < 0:
            raise InputError(f"--restart-batch must be >= 0, got {out['restart-batch']}")
        if not out["lr"] > 0:
            raise InputError(f"--lr must be > 0, got {out['lr']}")
        return out

    def images(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        return state["x"].detach().clamp(0, 1)

    def recovered_labels(self, state: dict[str, torch.Tensor]) -> list[int]:
        return self.labels.tolist() if self.labels.ndim == 1 else self.labels.argmax(-1).tolist()

    def extras(self, state: dict[str, torch.Tensor]) -> dict[str, Any]:
        """What else the attack recovered (kept with the best restart): ``{"report": JSON-able, "tensors": {...}}``."""
        return {}

    def optimizer(self, state: dict[str, torch.Tensor], lr: float) -> torch.optim.Optimizer:
        params = list(state.values())
        if self.optimizer_name == "closure":
            return ClosureSteps(params, lr)
        if self.optimizer_name == "lbfgs":
            return torch.optim.LBFGS(params, lr=lr, max_iter=1, history_size=100)
        return torch.optim.Adam(params, lr=lr)


class ClosureSteps(torch.optim.Optimizer):
    """For attacks whose closure takes the step itself (e.g. Levenberg-Marquardt): ``step`` just runs it."""

    def __init__(self, params, lr: float):
        super().__init__(params, {"lr": lr})

    def step(self, closure=None):
        return closure() if closure is not None else None
