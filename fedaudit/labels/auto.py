"""``auto``: the label method whose counts best explain this update, every candidate and its score reported.

``--strategy hybrid`` (default) walks one ordered table of routes (``auto_routes/table.py``; ``diagnostics.route``
names the one that answered), each kept because it beat the plain ensemble on held-out clients (models, image sources
and batches it was not built on; docs/results/labels.md, "Which routes earn their place"):

* the rules where they are near exact (one local step and input-independent outputs: random-init models), bias-count
  unless ZLG's or iLRG's raw counts lie clearly closer to their integers (``integrality``);
* one-step uploads of trained-like models: hidden-split where a hidden linear layer is wider than the batch and it
  verifies at least half of the samples, sample-split where B < C and its fit explains the update, bn-count where
  the upload carries BN buffers and labelled aux images are given (``bn-statistics``);
* FedAvg deltas: bn-count's reading of the BN buffers' mixture of the K batches where it explains it (relative
  residual below 0.05, model moved less than 0.01 of its norm; ``bn-mixture``); on models without batch-statistics
  BatchNorm client-fit (fedaudit/labels/client_fit.py: each step's class mix fitted so that a client simulated on the
  aux images reproduces the whole update), RLU where the outputs do not depend on the input
  (``rlu-input-independent``, with BN too); else the mean of the count methods' vectors (``ensemble``);
* every other update: the mean of the count methods' vectors (``ensemble``; the evidence, below, where fewer than two
  apply). On the held-out one-step uploads of trained models that now reach it the evidence trailed the ensemble by
  10.2 +- 2.4 points.

After the route, on a trained-like model's one-step upload and on any delta, the classes its output-layer update
shows present for certain (auto_routes/shown.py): where at most three are shown, the batch is read as those classes
only. The routes that read the number of negative output-bias entries (few classes to LLG, many to bias-count, three
by a share, one class by LLG and HFGI, and their BN-mixture companions) were dropped: out of sample they did not beat
the plain ensemble.

``--strategy evidence``: run every applicable count method (aux data where given, Gaussian dummies
otherwise), score each distinct count vector by how well it explains the output layer's update under the model
(fedaudit/labels/evidence.py: cosine distance between the expected and the observed weight and bias gradients, no
ground truth), keep the best; ties go to the earlier method of the rules' order. Exact cases keep their rule: a
batch of one (one step) is iDLG, a withheld output layer is GDBR.

``--strategy ensemble``: the mean of the count methods' vectors everywhere.

``--strategy rules`` (the earlier behaviour, and the fallback when no candidate can be scored): a fixed
preference by the softmax *spread*, the mean total-variation distance between each aux (or dummy) sample's
softmax and their mean. Spread < 0.3 (input-independent outputs, e.g. early training): bias-count, then ZLG, then
iLRG; otherwise (trained-like): LLG, then HFGI (docs/results/labels.md).
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
                     "ensemble: the mean of the candidates' counts; hybrid: the route table (rules where they are exact, "
                     "hidden-split, sample-split and bn-count on trained models' one-step uploads, bn-count's BN-mixture "
                     "reading, client-fit or RLU on FedAvg deltas, the ensemble elsewhere; "
                     "docs/results/labels.md)",
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
        reasons = []
        for name, method, sub in candidates(tm, session, None):
            why = method.why_not(tm, sub)
            if not why:
                return []
            reasons.append(f"{name}: {'; '.join(why)}")
        return ["no label method applies (" + " | ".join(reasons) + ")"]

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
