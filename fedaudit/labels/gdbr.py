"""GDBR (Zhang, Chow, Li: "Building Gradient Bridges"): label counts when the output layer's gradient is withheld.

From one earlier layer's shared weight gradient (default: the penultimate, the layer feeding the output layer),
bridge to the logits' gradient (docs/methods/labels.md, Derivations):
  s_k = <gradW_bar^[1]_k, W^[1]_k>  (+ b_k * gradb_k when that layer has a bias and its gradient is shared, 2.7)
  grada^[1] ~= s / a~                      (Eq. 17; a~ = aux mean post-ReLU output, zeros -> mean of non-zeros)
  W^[l]T gradz^[l] = gradx^[l]  by float64 least squares, l = 2..L   (Eqs. 18-19; ReLU masks ignored)
  lambda = B * (p~ - gradz_bar^[L])        (Eq. 21; p~ = aux mean softmax)
The architecture must be the one the theory covers (2.2): ReLU(Linear) stacks, or ReLU(Conv) with a 1x1 output as
the first stack, ending in a plain Linear output layer; no BatchNorm, dropout, pooling or residual on the bridged
path; widths not growing toward the output (full row rank). The model is traced with torch.fx and every deviation
is reported; by default a violation makes GDBR "not applicable" (``--ignore-assumptions`` runs it anyway, flagged).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import fx, nn

from fedaudit.errors import NotApplicable
from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts, samples_in_update
from fedaudit.labels.features import head_stats
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.requirements import BATCH_SIZE, Requirement
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel

_RELU = (nn.ReLU, F.relu, torch.relu, "relu")
_FLATTEN = (nn.Flatten, torch.flatten, "flatten", "view", "reshape")


@dataclass
class Chain:
    layers: list[str] = field(default_factory=list)  # module names, from the shared layer to the output layer
    violations: list[str] = field(default_factory=list)


def _kind(node: fx.Node, modules: dict[str, nn.Module]):
    if node.op == "call_module":
        return type(modules[str(node.target)])
    if node.op in ("call_function", "call_method"):
        return node.target
    return node.op


def _is(node: fx.Node, modules, kinds) -> bool:
    k = _kind(node, modules)
    return any(k is t or k == t for t in kinds)


def trace_chain(model: nn.Module, final: str, shared: str | None) -> Chain:
    """Walk back from the output layer through ReLU(Linear) stacks to ``shared`` (default: the first one met)."""
    chain = Chain()
    try:
        graph = fx.symbolic_trace(model).graph
    except Exception as exc:  # noqa: BLE001 - untraceable models simply cannot be checked
        chain.violations.append(f"the model cannot be traced to check GDBR's assumptions ({type(exc).__name__})")
        return chain
    modules = dict(model.named_modules())
    out = [n for n in graph.nodes if n.op == "output"][0].args[0]
    if not (out.op == "call_module" and out.target == final):
        chain.violations.append(f"the model's output is not the output layer {final!r} itself")
        return chain
    chain.layers.append(final)
    node = out.args[0]
    while True:
        while _is(node, modules, _FLATTEN):
            node = node.args[0]
        if not _is(node, modules, _RELU):
            what = _kind(node, modules)
            chain.violations.append(f"{chain.layers[0]!r} is fed by {getattr(what, '__name__', what)}, not ReLU (Lemma 4)")
            return chain
        node = node.args[0]
        if node.op != "call_module" or not isinstance(modules[node.target], (nn.Linear, nn.Conv2d)):
            what = _kind(node, modules)
            chain.violations.append(f"the ReLU before {chain.layers[0]!r} follows {getattr(what, '__name__', what)}, "
                                    "not a Linear or Conv layer (no BatchNorm, pooling or residual allowed)")
            return chain
        chain.layers.insert(0, node.target)
        if shared is None or node.target == shared:
            return chain
        if isinstance(modules[node.target], nn.Conv2d):
            chain.violations.append(f"{shared!r} is not reached: a conv layer can only be the first stack")
            return chain
        node = node.args[0]
        if node.op == "placeholder" or _is(node, modules, (operator.add, torch.add, "add")):
            chain.violations.append(f"{shared!r} is not on a ReLU(Linear) chain to the output")
            return chain


def _shared_grad(tm: ThreatModel) -> str | None:
    if tm.final_layer is None:
        return tm.no_output_layer()
    chain = trace_chain(tm.model, tm.final_layer, None)
    if len(chain.layers) < 2:
        return "assumptions violated: " + "; ".join(chain.violations)
    name = f"{chain.layers[0]}.weight"
    return None if tm.grad(name) is not None else f"needs the weight gradient of the bridged layer {name}, which the update withholds"


SHARED_LAYER_GRAD = Requirement("gdbr_layer_grad", "a ReLU(Linear) chain to the output and its first layer's weight gradient", _shared_grad)


@LABEL_METHODS.register
class GDBR(LabelMethod):
    name = "gdbr"
    rules_rank = (6, 6)
    multi_step_aware = True
    summary = "bridges from an earlier layer's gradient to the logits' gradient when the output layer is withheld"
    paper = "Zhang, Chow, Li: Building Gradient Bridges (GDBR)"
    requires = (SHARED_LAYER_GRAD, BATCH_SIZE)
    aux = "optional"
    options = (
        MethodOption("layer", str, "", "module whose weight gradient is bridged (default: the layer feeding the output layer)"),
        MethodOption("ignore-assumptions", bool, False, "run even when the architecture violates GDBR's assumptions (flagged)"),
    )

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        modules = dict(tm.model.named_modules())
        chain = trace_chain(tm.model, tm.output_layer, self.opt("layer") or None)
        violations = list(chain.violations)
        first = modules[chain.layers[0]] if len(chain.layers) >= 2 else None
        if first is None:
            raise NotApplicable("gdbr: assumptions violated: " + "; ".join(violations))
        w1 = first.weight.detach().double().cpu()
        g1 = tm.shared_grad(f"{chain.layers[0]}.weight").double().cpu()
        s = (g1 * w1).flatten(1).sum(1)
        if first.bias is not None:
            gb1 = tm.grad(f"{chain.layers[0]}.bias")
            if gb1 is None:
                violations.append(f"{chain.layers[0]} has a bias whose gradient is not shared (no bias correction possible)")
            else:
                s = s + first.bias.detach().double().cpu() * gb1.double().cpu()  # section 2.7
        for name in chain.layers[1:]:
            w = modules[name].weight
            if w.shape[0] > w.shape[1]:
                violations.append(f"{name} widens ({w.shape[1]} -> {w.shape[0]}): W W^T is singular")
        captured: dict[str, list[torch.Tensor]] = {}
        hook = first.register_forward_hook(lambda m, i, o: captured.setdefault("a", []).append(torch.relu(o.detach())))
        try:
            aux = self.aux_of(session)
            _, p = head_stats(tm, aux.images, normalized=aux.normalized)
        finally:
            hook.remove()
        a = torch.cat(captured["a"]).double().cpu()
        if isinstance(first, nn.Conv2d) and a.shape[2:] != (1, 1):
            violations.append(f"{chain.layers[0]} is a conv whose output is {tuple(a.shape[2:])}, not 1x1 (Theorem 2)")
        a_mean = a.flatten(1).mean(0) if a.ndim == 2 else a.mean((0, 2, 3))
        nonzero = a_mean[a_mean > 0]
        if len(nonzero) == 0:
            violations.append(f"every aux activation after {chain.layers[0]} is zero")
        a_mean = torch.where(a_mean > 0, a_mean, nonzero.mean() if len(nonzero) else torch.tensor(1.0, dtype=torch.float64,
                                                                                            device=a_mean.device))
        if violations and not self.opt("ignore-assumptions"):
            raise NotApplicable("gdbr: assumptions violated: " + "; ".join(violations))
        grad = s / a_mean  # Eq. 17
        ranks = {}
        for name in chain.layers[1:]:
            w = modules[name].weight.detach().double().cpu()
            ranks[name] = int(torch.linalg.matrix_rank(w))
            grad = torch.linalg.lstsq(w.T, grad.unsqueeze(1)).solution.squeeze(1)  # Eqs. 18-19
        b = samples_in_update(tm)
        raw = b * (p.mean(0) - grad)  # Eq. 21
        result = LabelResult(raw, integer_counts(raw, b), {
            "chain": chain.layers, "sum_logit_grad": float(grad.sum()), "ranks": ranks, "aux": aux.kind,
            "assumptions_violated": violations})
        if violations:
            result.warnings.append("assumptions violated (run with --ignore-assumptions): " + "; ".join(violations))
        return result
