"""``auto``: the label method whose counts best explain this update, every candidate and its score reported.

``--strategy hybrid`` (default): the rules below where they are near exact (one local step and input-independent
outputs: random-init models). Elsewhere, a one-step upload of a model with a hidden linear layer wider than the batch
goes to hidden-split where it verifies at least half of the samples, and one of a batch smaller than the class count
to sample-split where its fit explains the update (it splits the update into its samples instead of reading per-class
error masses). Then the class-count route, by the number of negative output-bias-gradient entries: at most two
(a batch of few classes) reads the plain ensemble of the count methods (LLG, the earlier rule, did not beat it on 348
held-out clients: docs/results/labels.md, "Which routes earn their place"), more on a model with trained-like outputs
bias-count, and the whole batch goes to one class where one entry is negative and LLG and HFGI agree.
What no route takes goes to client-fit or the mean of the methods on FedAvg deltas (below) and to the evidence on
one-step updates. Before all these, a one-step upload of a trained-like model that carries BN buffers, with
labelled aux images, goes to bn-count unless the batch reads as a single class (then all to that class; the BN
statistics count sure samples, the output layer hardly). Where the
rules apply, bias-count is kept unless ZLG's or iLRG's raw counts lie clearly closer to their integer counts (a
truth-free check of each method's assumption on this batch; docs/methods/labels.md). Measured on
MNIST LeNet/ConvNet rows (docs/results/labels.md) the evidence alone loses up to 9 points to the rules at random
init, K = 1 (it is sometimes confidently wrong there) and gains up to 19 points where the rules' assumptions fail.

On a FedAvg delta (several local steps) of more classes, of a model whose BatchNorm (if any) does not normalise with
batch statistics during local training, hybrid takes client-fit (fedaudit/labels/client_fit.py), which fits each step's
class mix so that a client simulated on the aux images reproduces the whole update, rather than guessing the client's
path as RLU must (docs/results/labels.md, "client-fit"; before it, RLU where its least squares fitted the update, else
the ensemble), except on a model whose outputs do not depend on its input (softmax spread below INPUT_INDEPENDENT),
where RLU's model is exact and it is returned, with batch-statistics BatchNorm too (ResNets at random init, where no
BN-statistics reading is tried first; "ResNet-10 and ResNet-18 FedAvg deltas"). Other deltas (BatchNorm in train mode,
e.g. the ConvNet, where RLU trails bias-count and ZLG by 20-50 points and client-fit the ensemble by 7 points on
average, docs/results/labels.md, "client-fit on the BN ConvNet") first go to bn-count where labelled aux images are
given and its counts explain the BN buffers' mixture of the K batches to a relative residual below 0.05 and the model
moved less than 0.01 of its norm (on 36 held-out trained ConvNet clients: 87.0% against 77.7), then to the class-count
route (where its bias-count answers a client whose BN reading was rejected, the mean with that reading and LLG's where
those two agree: auto_routes/bn_mixture.py's ``by_agreement``), then get the mean of the count
vectors of bias-count, ZLG, iLRG, LLG, LLG+ and RLU (``--strategy ensemble`` everywhere), which trails the best single
method by 4.1-7.5 points on the ConvNet's held-out batches (benchmarks/labels_ensemble.py). The ensemble trails the
evidence on one-step updates, where it is not used. Last, on any delta (after every route but RLU's on a model whose
outputs do not depend on the input), the classes its output-layer update shows present for certain
(auto_routes/shown.py's ``by_shown_on_delta``: at most three shown, bn-count's reading of the BN mixture projected onto
them; two-class clients of the ConvNet held out 67.9 -> 88.4% trained, 68.2 -> 85.9% at random init); on a model without
batch-statistics BN, client-fit's reading projected onto them (the DLG LeNets' two-class clients held out 83.7 -> 93.2%
at random init, 65.0 -> 87.4% trained).

``--strategy evidence``: run every applicable count method (aux data where given, Gaussian dummies
otherwise), score each distinct count vector by how well it explains the output layer's update under the model
(fedaudit/labels/evidence.py: cosine distance between the expected and the observed weight and bias gradients, no
ground truth), keep the best; ties go to the earlier method of the rules' order. Exact cases keep their rule: a
batch of one (one step) is iDLG, a withheld output layer is GDBR.

``--strategy rules`` (the earlier behaviour, and the fallback when no candidate can be scored): a fixed
preference by the softmax *spread*, the mean total-variation distance between each aux (or dummy) sample's
softmax and their mean. Spread < 0.3 (input-independent outputs, e.g. early training): bias-count, then ZLG, then
iLRG; otherwise (trained-like): LLG, then HFGI (docs/results/labels.md).

The routes live in fedaudit/labels/auto_routes/, one family per module; their order and what each applies to is one
table, ``auto_routes/table.py`` (``ROUTES``), read on the facts computed once per update (``Features``); this module
walks it and names the route that answered in ``diagnostics.route``.
"""

from __future__ import annotations

from fedaudit.labels.auto_routes import shown
from fedaudit.labels.auto_routes.common import candidates
from fedaudit.labels.auto_routes.table import STRATEGIES, Features, State, choose
from fedaudit.labels.base import LabelMethod, LabelResult
from fedaudit.labels.registry import LABEL_METHODS
from fedaudit.methods import MethodOption
from fedaudit.models.head import shared_head_passes
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


@LABEL_METHODS.register
class Auto(LabelMethod):
    name = "auto"
    summary = "runs the applicable methods and keeps the counts that best explain the update (reports every score)"
    paper = "see docs/results/labels.md"
    options = (
        MethodOption("strategy", str, "hybrid", "evidence: score every candidate; rules: a fixed preference order; "
                     "ensemble: the mean of the candidates' counts; hybrid: rules where they are exact (one step, "
                     "input-independent outputs), hidden-split on trained models' one-step uploads where a hidden "
                     "linear layer is wider than the batch, sample-split on those of B < C samples, "
                     "bn-count on trained models' one-step uploads with BN buffers, the ensemble on "
                     "few classes, bias-count on more of a trained model (one class where LLG and HFGI agree), "
                     "client-fit (models without batch-statistics BatchNorm) or the "
                     "ensemble on other FedAvg deltas (bn-count first on BN buffers' mixtures it explains), "
                     "evidence elsewhere",
                     STRATEGIES),
        MethodOption("bn-aux-batches", str, "by-steps", "hybrid, FedAvg deltas with BN buffers: how bn-count's route "
                     "normalises the aux images (bn-count's --aux-batches; by-steps: matched from 4 local steps, "
                     "mixture below; mixture: the earlier, cheaper reading)",
                     ("by-steps", "matched", "simulated", "mixture")),
        MethodOption("shown-mean-steps", int, shown.SHOWN_MEAN_STEPS, "hybrid, FedAvg deltas of BN models that show at most "
                     f"{shown.FEW_SHOWN} classes: up to this many local steps the shown classes are split by the mean of the "
                     "BN reading and bias-count (0: the BN reading alone)"),
    )

    @classmethod
    def why_not(cls, tm: ThreatModel, session: Session | None = None) -> list[str]:
        session = session or Session()
        reasons: dict[str, list[str]] = {}  # each reason once, with the methods it stops
        for name, method, sub in candidates(tm, session, None):
            why = method.why_not(tm, sub)
            if not why:
                return []
            reasons.setdefault("; ".join(dict.fromkeys(why)), []).append(name)
        if len(reasons) == 1:
            return [f"no label method applies: {next(iter(reasons))}"]
        return ["no label method applies (" + " | ".join(f"{', '.join(names)}: {why}" for why, names in reasons.items())
                + ")"]

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        state = State()  # what a route tried and left, reported beside the chosen one
        with shared_head_passes():  # the methods it runs probe the head with the same images: one pass each
            features = Features.of(tm, session, self.opt("strategy"))
            chosen = choose(tm, session, features, state, self.opts)
            if chosen is None:  # no candidate applies: the reasons, as the CLI reports them
                self.check_applicable(tm, session)
                raise AssertionError("unreachable")
            result, route = chosen
            if features.hybrid and features.multi_step and tm.final_layer is not None:
                result = shown.by_shown_on_delta(tm, session, result, state.notes, self.opt("shown-mean-steps"))
        result.diagnostics.update(state.notes)
        result.diagnostics["route"] = route
        return result
