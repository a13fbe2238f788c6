"""DLG (Zhu et al. 2019, "Deep Leakage from Gradients"): optimise dummy images and dummy labels jointly so that
their gradient matches the update in squared L2 distance; L-BFGS with lr 1.

Choices: one L-BFGS evaluation per iteration (``max_iter=1``) so iteration budgets compare with the other
attacks (DLG's code runs up to 20 evaluations per ``step``); images start from N(0,1) in the normalised space
(as DLG), mapped to pixels and clamped to [0,1]; the dummy label logits start from the label method's result
(``--label-init recovered``, iDLG's improvement) or from N(0,1) (``random``, DLG's original).
"""

from __future__ import annotations

import torch

from fedaudit.attacks.base import OptimizationAttack
from fedaudit.attacks.init import normal_init
from fedaudit.attacks.objectives import l2_distance
from fedaudit.attacks.registry import ATTACKS
from fedaudit.methods import MethodOption


@ATTACKS.register
class DLG(OptimizationAttack):
    name = "dlg"
    summary = "joint image + label optimisation, squared L2 gradient distance, L-BFGS"
    paper = "Zhu et al. 2019, DLG"
    defaults = {"iterations": 300, "lr": 1.0, "schedule": "none", "restarts": 1}
    optimizer_name = "lbfgs"
    options = (MethodOption("label-init", str, "recovered", "dummy label logits start from the recovered labels or N(0,1)",
                            ("recovered", "random")),)

    def init_state(self, gen):
        x = normal_init(self.tm.spec, self.shape, gen)
        c = self.tm.spec.num_classes
        if self.opts["label-init"] == "random":
            y = torch.randn(self.num_images, c, generator=gen, device="cpu")
        else:
            y = 5.0 * torch.nn.functional.one_hot(self.labels.cpu(), c).float()
        dev = self.engine.device
        return {"x": x.to(dev).requires_grad_(True), "y": y.to(dev).requires_grad_(True)}

    def closure(self, state, it):
        g = self.engine.gradient(state["x"], state["y"])
        loss = l2_distance(g, self.engine.target.tensors)
        state["x"].grad, state["y"].grad = torch.autograd.grad(loss, [state["x"], state["y"]])
        return loss.detach()

    def distance(self, state):
        g = self.engine.gradient(state["x"].detach(), state["y"].detach(), create_graph=False)
        return float(l2_distance(g, self.engine.target.tensors))

    def recovered_labels(self, state):
        return state["y"].detach().argmax(-1).tolist()
