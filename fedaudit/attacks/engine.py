"""The gradient engine: grad_w L(F(x', w), y') through the real architecture, with a graph for second order.

One place for every optimisation attack (docs/architecture.md):
* functional call over the checkpoint's parameters (``torch.func.functional_call``), so the model object is
  never mutated and BatchNorm buffers are fresh copies on every call;
* BatchNorm in the mode the update records (train: batch statistics, as the client had; eval: running stats);
* normalisation inside the forward (x' lives in [0,1] pixel space);
* restricted to the parameters present in the update (a withheld tensor is simply not matched);
* optional unrolling of K local SGD steps for FedAvg deltas: the synthetic update is converted exactly as the
  recorded one is (fedaudit/conversion.py), so both sides of the match mean the same thing;
* restarts as one batch (``batched_gradient``): R dummy batches in one call, each with its own parameter
  gradient (``torch.func.vmap`` over ``torch.func.grad``) and, in train mode, its own BatchNorm batch statistics.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from fedaudit.attacks.objectives import reference_norm, row_norms
from fedaudit.conversion import gradient_scale
from fedaudit.models.attention import differentiable_attention
from fedaudit.models.normalize import normalize
from fedaudit.models.smooth_twins import with_smooth_twins
from fedaudit.threat_model import ThreatModel


@dataclass
class Target:
    names: list[str]  # present parameters, in the model's order
    tensors: list[torch.Tensor]  # the update's averaged gradient g_hat for each of them
    # G > 0: G updates' targets stacked on a leading axis ([G, *shape] each), for stacked proxies
    # (fedaudit/attacks/stacked_targets.py); 0: one update's
    groups: int = 0

    @functools.cached_property
    def norm(self) -> torch.Tensor:
        """||g_hat|| over every tensor, computed once in float64 (the cosine distances divide by it each iteration);
        [G] norms for stacked targets."""
        if self.groups:
            return torch.stack([reference_norm([t[i] for t in self.tensors]) for i in range(self.groups)])
        return reference_norm(self.tensors)

    def norm_of(self, i: int) -> torch.Tensor:
        """||g_hat_i|| of tensor i alone ([G] for stacked targets)."""
        t = self.tensors[i]
        return row_norms([t]) if self.groups else t.norm()

    @classmethod
    def stack(cls, targets: list[Target]) -> Target:
        """The targets of several updates of one model, stacked (each must match the same tensors)."""
        names = targets[0].names
        if any(t.names != names or t.groups for t in targets):
            raise ValueError("stacked targets must match the same parameters of one model")
        return cls(names, [torch.stack(ts) for ts in zip(*(t.tensors for t in targets))], len(targets))


class GradientEngine:
    def __init__(self, tm: ThreatModel, device: torch.device | str = "cpu", unroll: bool = False):
        self.tm = tm
        self.spec = tm.spec
        self.device = torch.device(device)
        # layers without a second derivative (Hardswish, Hardsigmoid) are swapped for smooth twins in a copy: the
        # attack's model only (fedaudit/models/smooth_twins.py); ``smoothed`` says which, for the report
        model, self.smoothed = with_smooth_twins(tm.model.to(self.device))
        self.model = model
        self.params = {k: p.detach() for k, p in model.named_parameters()}
        self.buffers = {k: b.detach() for k, b in model.named_buffers()}
        # functional_call unties shared weights on every call unless told there are none (~0.1 ms per LeNet call)
        self._tied = len(list(model.named_parameters(remove_duplicate=False))) != len(self.params) or \
            len(list(model.named_buffers(remove_duplicate=False))) != len(self.buffers)
        self.train_bn = tm.train_bn
        self.target = Target(list(tm.present), [tm.gradient[k].to(self.device) for k in tm.present])
        self.steps = tm.meta.local_steps if unroll else 1
        self.unroll = unroll and self.steps > 1
        momentum = float((tm.meta.optimizer or {}).get("momentum", 0) or 0)
        self.lr = tm.meta.local_lr
        if self.unroll and momentum:
            raise ValueError("unrolling supports plain SGD local training (momentum 0)")

    def forward(self, x01: torch.Tensor, params: dict[str, torch.Tensor] | None = None,
                capture: list | None = None, bn_inputs: list | None = None) -> torch.Tensor:
        """Logits of images in [0,1]. ``capture`` collects every ReLU/activation output (activation terms);
        ``bn_inputs`` collects (module name, input) of every BatchNorm layer in forward order (BN-statistic priors)."""
        state = dict(params or self.params)
        state.update({k: b.clone() for k, b in self.buffers.items()})
        if self.model.training != self.train_bn:  # walk the modules only when the mode is wrong (~4% of a LeNet
            self.model.train(self.train_bn)      # iteration otherwise); train mode is undone below
        hooks = []
        if capture is not None:
            for m in self.model.modules():
                if isinstance(m, (torch.nn.ReLU, torch.nn.Sigmoid, torch.nn.LeakyReLU, torch.nn.GELU)):
                    hooks.append(m.register_forward_hook(lambda mod, i, o: capture.append(o)))
        if bn_inputs is not None:
            for name, m in self.model.named_modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    hooks.append(m.register_forward_hook(lambda mod, i, o, name=name: bn_inputs.append((name, i[0]))))
        try:
            with differentiable_attention():  # a ViT's attention, differentiated twice (fedaudit/models/attention.py)
                return functional_call(self.model, state, (normalize(x01, self.spec),), tie_weights=self._tied)
        finally:
            for h in hooks:
                h.remove()
            if self.train_bn:
                self.model.eval()

    @staticmethod
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy; ``labels`` are class indices [N] or soft label logits [N, C] (DLG)."""
        if labels.dtype in (torch.int64, torch.int32):
            return F.cross_entropy(logits, labels)
        return torch.mean(torch.sum(-torch.softmax(labels, -1) * torch.log_softmax(logits, -1), -1))

    def gradient(self, x01: torch.Tensor, labels: torch.Tensor, create_graph: bool = True,
                 capture: list | None = None, names: list[str] | None = None,
                 bn_inputs: list | None = None) -> list[torch.Tensor]:
        """The dummy batch's averaged gradient for the matched parameters (one step, or K unrolled steps);
        ``names`` restricts it to some of them (stepwise attacks), in the order given."""
        names = self.target.names if names is None else names
        if not self.unroll:
            params = {k: (p.requires_grad_(True) if k in names else p) for k, p in
                      ((k, p.detach()) for k, p in self.params.items())}
            loss = self.loss(self.forward(x01, params, capture, bn_inputs), labels)
            grads = torch.autograd.grad(loss, [params[k] for k in names], create_graph=create_graph, allow_unused=True)
            # a parameter the graph does not reach (an auxiliary head a client trained in train mode) has gradient 0
            return [torch.zeros_like(params[k]) if g is None else g for k, g in zip(names, grads)]
        full = dict(zip(self.target.names, self._unrolled(x01, labels, create_graph, capture, bn_inputs)))
        return [full[k] for k in names]

    @functools.cached_property
    def _restart_model(self) -> torch.nn.Module:
        """A copy of the model for batched restarts: BatchNorm layers keep no running statistics, so in train mode
        each restart's forward normalises with its own batch statistics under vmap (and nothing is updated in
        place); in eval mode the checkpoint's running statistics are used, as in ``forward``."""
        model = copy.deepcopy(self.model)
        if self.train_bn:
            torch.func.replace_all_batch_norm_modules_(model)
        return model.train(self.train_bn)

    def batched_gradient(self, x01: torch.Tensor, labels: torch.Tensor, names: list[str] | None = None) -> list[torch.Tensor]:
        """Per-restart gradients of R dummy batches at once: ``x01`` is [R, B, C, H, W] and each returned tensor is
        [R, *shape], differentiable with respect to ``x01`` (second order), restart r's equal to
        ``gradient(x01[r], labels, names=names)``. One-step updates only (not ``unroll``); no activation or BN-input
        capture."""
        if self.unroll:
            raise ValueError("batched restarts do not unroll local steps")
        names = self.target.names if names is None else names
        model = self._restart_model
        matched = {k: self.params[k] for k in names}
        fixed = {k: p for k, p in self.params.items() if k not in matched}
        fixed.update(dict(model.named_buffers()))

        def loss(m: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
            return self.loss(functional_call(model, {**fixed, **m}, (normalize(x, self.spec),)), labels)

        # randomness="different": a train-mode model with dropout (torchvision's SqueezeNet, MobileNet, VGG heads)
        # draws its own mask for each restart, as one restart after another would; vmap's default refuses any draw
        with differentiable_attention():
            g = vmap(grad(loss), in_dims=(None, 0), randomness="different")(matched, x01)
        return [g[k] for k in names]

    def _unrolled(self, x01, labels, create_graph, capture, bn_inputs=None):
        """K SGD steps on consecutive chunks of the dummy batch; returns -(w_K - w_0) / (lr K) like conversion."""
        w0 = {k: p.detach().requires_grad_(True) for k, p in self.params.items()}
        w = dict(w0)
        chunks_x, chunks_y = x01.chunk(self.steps), labels.chunk(self.steps)
        trainable = list(w0)
        for xk, yk in zip(chunks_x, chunks_y):
            loss = self.loss(self.forward(xk, w, capture, bn_inputs), yk)
            grads = torch.autograd.grad(loss, [w[k] for k in trainable], create_graph=create_graph, allow_unused=True)
            w = {k: w[k] if g is None else w[k] - self.lr * g for k, g in zip(trainable, grads)}
        scale = gradient_scale(self.tm.meta)
        return [-(w[k] - w0[k]) / scale for k in self.target.names]
