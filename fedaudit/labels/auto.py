"""``auto``: the label method whose counts best explain this update, every candidate and its score reported.

``--strategy hybrid`` (default): the rules below where they are near exact (one local step and input-independent
outputs: random-init models). Elsewhere, a one-step upload of a model with a hidden linear layer wider than the batch
goes to hidden-split where it verifies at least half of the samples, and one of a batch smaller than the class count
to sample-split where its fit explains the update (it splits the update into its samples instead of reading per-class
error masses). Then a route by the number of negative output-bias-gradient entries: at
most two (a batch of few classes) goes to LLG (the evidence follows RLU, which trails LLG there;
docs/results/labels.md); on a model with trained-like outputs at least four goes to bias-count, and three, in a
one-step upload, to bias-count where it puts most of the batch on the classes with a positive entry, else to LLG.
What no route takes goes to client-fit or the mean of the methods on FedAvg deltas (below) and to the evidence on
one-step updates. Before all these, a one-step upload of a trained-like model that carries BN buffers, with
labelled aux images, goes to bn-count unless the batch reads as a single class (then all to that class; the BN
statistics count sure samples, the output layer hardly). Where the
rules apply, bias-count is kept unless ZLG's or iLRG's raw counts lie clearly closer to their integer counts (a
truth-free check of each method's assumption on this batch; docs/methods/labels.md). Measured on
MNIST LeNet/ConvNet rows (docs/results/labels.md) the evidence alone loses up to 9 points to the rules at random
init, K = 1 (it is sometimes confidently wrong there) and gains up to 19 points where the rules' assumptions fail.

On a FedAvg delta (several local steps) of more classes, of a model whose BatchNorm (if any) does not normalise with
batch statistics during local training, hybrid takes client-fit (fedaudit/labels/client_fit.py), which fits each
step's class mix so that a client simulated on the aux images reproduces the whole update, rather than guessing the
client's path as RLU must (docs/results/labels.md, "client-fit"; before it, RLU where its least squares fitted the
update, else the ensemble), except on a model whose outputs do not depend on its input (softmax spread below
INPUT_INDEPENDENT), where RLU's model is exact and it is returned, with batch-statistics BatchNorm too (ResNets at
random init, where no BN-statistics reading is tried first; "ResNet-10 and ResNet-18 FedAvg deltas"). Other deltas (BatchNorm in train mode, e.g. the
ConvNet, where RLU trails bias-count and ZLG by 20-50 points and client-fit the ensemble by 7 points on average,
docs/results/labels.md, "client-fit on the BN ConvNet") first go to bn-count where labelled aux images are given and
its counts explain the BN buffers' mixture of the K batches to a relative residual below 0.05 and the model moved
less than 0.01 of its norm (on 36 held-out trained ConvNet clients: 87.0% against 77.7), then to the class-count
routes (where the many-classes route's bias-count answers a client whose BN reading was rejected, the mean with that
reading and LLG's where those two agree: ``_by_agreement``), then get the mean of the count vectors of
bias-count, ZLG, iLRG, LLG, LLG+ and RLU (``--strategy ensemble`` everywhere), which trails the best single method
by 4.1-7.5 points on the ConvNet's held-out batches (benchmarks/labels_ensemble.py). The ensemble trails the
evidence on one-step updates, where it is not used. Last, on any delta (after every route but RLU's on a model
whose outputs do not depend on the input), the classes its output-layer update shows present for certain
(``_by_shown_on_delta``: at most three shown, bn-count's reading of the BN mixture projected onto them; two-class
clients of the ConvNet held out 67.9 -> 88.4% trained, 68.2 -> 85.9% at random init); on a model without
batch-statistics BN, client-fit's reading projected onto them (the DLG LeNets' two-class clients held out 83.7 ->
93.2% at random init, 65.0 -> 87.4% trained).

``--strategy evidence``: run every applicable count method (aux data where given, Gaussian dummies
otherwise), score each distinct count vector by how well it explains the output layer's update under the model
(fedaudit/labels/evidence.py: cosine distance between the expected and the observed weight and bias gradients, no
ground truth), keep the best; ties go to the earlier method of the rules' order. Exact cases keep their rule: a
batch of one (one step) is iDLG, a withheld output layer is GDBR.

``--strategy rules`` (the earlier behaviour, and the fallback when no candidate can be scored): a fixed
preference by the softmax *spread*, the mean total-variation distance between each aux (or dummy) sample's
softmax and their mean. Spread < 0.3 (input-independent outputs, e.g. early training): bias-count, then ZLG, then
iLRG; otherwise (trained-like): LLG, then HFGI (docs/results/labels.md).
"""

from __future__ import annotations

import time

import torch

from fedaudit.errors import NotApplicable
from fedaudit.labels import LABEL_METHODS, presence
from fedaudit.labels.base import LabelMethod, LabelResult, integer_counts
from fedaudit.labels.evidence import Evidence
from fedaudit.labels.features import head_stats
from fedaudit.methods import MethodOption
from fedaudit.models.head import shared_head_passes
from fedaudit.session import Aux, Session
from fedaudit.threat_model import ThreatModel

DUMMIES = 500
SPREAD_THRESHOLD = 0.3
# hybrid, one step at random init: leave the rules' choice only for a candidate whose raw counts are at most this
# fraction of its distance from their integers (a close call went wrong on a 4-digit weights upload)
MARGIN = 0.5
# hybrid, elsewhere: at most this many negative output-bias-gradient entries (the classes whose share of the batch
# exceeds their mean predicted probability: iDLG's set) reads as a non-IID batch of few classes, where LLG is the
# most accurate method (docs/results/labels.md); more goes to the evidence score
FEW_CLASSES = 2
# hybrid, trained-like outputs: at least this many negative entries reads as a batch spread over many classes. There
# the update carries little count information beyond which classes are present, and bias-count (the batch's softmax
# sum taken as B times the aux mean: a composition like the aux set's) leads RLU, which the evidence and the
# ensemble follow, by 12 points on the trained DLG LeNet's FedSGD batches and 19-42 on trained ConvNet deltas
# (docs/results/labels.md, "Many classes")
MANY_CLASSES = 4
# hybrid, trained-like outputs, one local step, exactly FEW_CLASSES + 1 negative entries (between the routes above):
# where bias-count puts more than this share of the batch on the classes whose entry is positive, little of the
# batch's error mass shows on the negative classes (sure samples of other present classes hide it): a batch spread
# over many classes, which goes to bias-count; otherwise a batch of about three classes, which goes to LLG. Chosen on
# the main table's trained batches with three negative entries (trials 0-3, 42 batches: 0.6-0.625 best) and checked
# on 78 more (trials 4-11): 74.3% InsAcc against the evidence's 69.3 (random batches 78.5 against 55.8, three-class
# ones 72.1 against 76.3; benchmarks/labels_three_negative.py, docs/results/labels.md, "Three negative entries")
INVISIBLE_SHARE = 0.6
# hybrid, trained-like outputs, bn-count applicable: one negative entry and at least this share of the batch on that
# class by bn-count reads as a single-class batch: all of it goes to that class (docs/results/labels.md, "BN statistics")
ONE_CLASS_SHARE = 0.8
# hybrid, a FedAvg delta of a BN model read as one class by the class-count route: bn-count's rejected reading of the
# BN mixture replaces it where it puts less than DOUBT_SHARE of the batch on that class and the model moved less than
# DOUBT_MAX_CHANGE of its norm. Chosen on labels_fedavg's trained-ConvNet clients, trials 0-2: on two-class clients
# (every method but bn-count there reads the last local steps' class alone) bn-count put 0.19-0.53 on the claimed
# class and led wherever the change was below 0.043, and fell far behind from 0.082 on (momentum-0.9 clients of 8
# steps); on one-class clients it put 0.64-1.0 there. Judged on trials 3-5 (docs/results/labels.md, "Two-class
# FedAvg clients")
DOUBT_SHARE = 0.6
DOUBT_MAX_CHANGE = 0.05
# hybrid, bn-count's accepted reading of a FedAvg client's BN mixture within this total-variation distance of the aux
# set's class mix: the mean of its counts and bias-count's (bias-count assumes that mix; there it led bn-count on random
# batches of 8 steps by 2-8 points). Chosen on labels_fedavg's trained-ConvNet random and Dirichlet clients, trials
# 0-2 (0.25 and 0.3 alike; Dirichlet readings lay at 0.29-0.55); the scan showed trials 3-5 beside them, so the
# unseen checks are the held-out client set 4 and the K = 2 grid (docs/results/labels.md, "Near the aux mix")
NEAR_AUX_TV = 0.25
# hybrid, a FedAvg delta of a BN model sent to the many-classes route (bias-count) with bn-count's reading of the BN
# mixture rejected: where that reading and LLG's lie within this total-variation distance of each other, the mean of
# the three count vectors. Two channels with independent errors (the BN statistics of every step; the output layer's
# impact of each label) agree on a skewed (non-IID) client and disagree on a client spread like the aux set, where
# bias-count's assumption holds (docs/results/labels.md, "Two readings agree")
AGREE_TV = 0.5
# hybrid, several local steps (a FedAvg delta) of a batch of more than FEW_CLASSES classes: the mean of these
# methods' count vectors (docs/results/labels.md)
ENSEMBLE = ("bias-count", "zlg", "ilrg", "llg", "llg-plus", "rlu")
# hybrid, a FedAvg delta: below this softmax spread every sample gets (nearly) the same softmax at the global model,
# RLU's model of the output layer is then nearly exact, and it leads client-fit, whose simulated batches add the draw
# of the aux images (docs/results/labels.md, "client-fit"), and on a model with batch-statistics BatchNorm every
# BN-statistics reading and the ensemble ("ResNet-10 and ResNet-18 FedAvg deltas"). Measured spreads: the PyTorch-init
# LeNet 0.0004; CIFAR ResNet-10/18 at random init 0.039-0.055 (twelve inits: ResNet-10 at widths 16 and 64, ResNet-18 at 16); ConvNets at random
# init 0.114-0.131; the DLG LeNet 0.15 at random init. 0.05 (chosen on the LeNets) split the ResNet-18's inits, where
# RLU led the ensemble by 3.0 +- 1.2 points per client: 0.08 lies in the gap between the ResNets and the ConvNets
INPUT_INDEPENDENT = 0.08
# hybrid, a FedAvg delta: client-fit unrolls K steps of the whole model on 16 aux images per class with second
# derivatives; above this many parameters (not measured: the LeNets have 6-62 thousand) its time and memory are not
# known, so the earlier route runs: RLU where its least-squares residual stays below RLU_MAX_RESIDUAL of the update's
# norm, else the ensemble (docs/results/labels.md, "FedAvg deltas of shuffled and Dirichlet clients")
CLIENT_FIT_MAX_PARAMETERS = 1_000_000
RLU_MAX_RESIDUAL = 0.1
# hybrid, trained-like outputs, one step, B < C, aux images: sample-split is kept where its fit (sum over samples of
# |q_n - y_n|^2, equation (2) of fedaudit/labels/sample_split.py) is at most this. Its final fits on the main table's
# trained batches of 8 were 1e-9 to 1e-4 (right or one sample off); a search that found no labelling stays at the
# first fit's 1e-2 to 1e-1
SPLIT_MAX_FIT = 1e-2
# hybrid, trained-like outputs, one step: hidden-split is kept where it verified at least this share of the batch (the
# others take the verified samples' class mix). On a trained MLP's batches of 16-32 it verified 34-100% (all
# verified labels right but one); at B = 64 23-50%, where the leftover guess loses to bias-count on random batches
# (docs/results/labels.md, "hidden-split")
HIDDEN_MIN_RESOLVED = 0.5
# ... and only for batches of at most this many samples: at B = 64 it was never kept on that MLP, and on Flower's CNN
# (a probe) it verified 32 of a single-class batch of 64, 23 of them with a wrong label: with that many samples the
# peeled update's rounding grows until wrong candidates pass the rank test
HIDDEN_MAX_BATCH = 32
# hybrid, trained-like outputs, one step, after the count routes: at most this many classes shown present for certain
# (a negative entry in their output-weight-gradient row; fedaudit/labels/presence.py) reads as a batch of those
# classes only, counted by the mean of SHOWN_MEMBERS' counts projected onto them. On the label benchmark's trained
# models no absent class was ever shown and the batches of three classes showed 2-3 (docs/results/labels.md, "Shown
# classes"); 4 and 5 gave the same and worse results there
FEW_SHOWN = 3
# hybrid, a FedAvg delta of a model with batch-statistics BatchNorm showing at most FEW_SHOWN classes: up to this many
# local steps the shown classes are split by the mean of bn-count's and bias-count's readings projected onto them
# (option shown-mean-steps). At K = 2 the two readings err apart (the trained ResNet-10's two-class clients: BN
# reading 81.5, the mean 91.7 on 16 held-out clients); at K >= 4 the ConvNet's bias update follows its last steps and
# the mean lost 1-5 points there (docs/results/labels.md, "A two-step client's shown classes")
SHOWN_MEAN_STEPS = 2
SHOWN_MEMBERS = ("bias-count", "zlg", "llg", "llg-plus", "rlu", "hfgi")
UNTRAINED = ("bias-count", "zlg", "ilrg", "llg", "hfgi", "fedleak", "gdbr")
TRAINED = ("llg", "hfgi", "zlg", "bias-count", "ilrg", "fedleak", "gdbr")
# evidence candidates, in tie-break order (the exact-at-random-init methods first)
CANDIDATES = ("bias-count", "zlg", "ilrg", "rlu", "llg-plus", "llg", "hfgi", "fedleak")


def _probe_aux(tm: ThreatModel, session: Session) -> Aux:
    """The images the head is probed with: the session's aux data, else Gaussian dummies."""
    return session.aux if session.aux is not None else Aux.dummies(tm.spec, DUMMIES, session.seed)


def _probe_head(tm: ThreatModel, session: Session) -> tuple[float, float]:
    """(softmax spread, smallest feature into the output layer) of the aux images (or dummies): one forward serves
    the regime and the shown-classes test's sign check (presence.why_not)."""
    aux = _probe_aux(tm, session)
    h, p = head_stats(tm, aux.images, normalized=aux.normalized)
    return float(0.5 * (p - p.mean(0)).abs().sum(1).mean()), float(h.min())


def _shown(tm: ThreatModel, session: Session, min_feature: float | None
           ) -> tuple[list[str], torch.Tensor | None, torch.Tensor | None]:
    """(why the shown-classes test cannot be read, shown [C], row minima [C]) of presence.py; the probe images run
    only where ``min_feature`` (from _probe_head) is not already known."""
    probe = _probe_aux(tm, session) if min_feature is None else None
    why = presence.why_not(tm, probe, min_feature)
    if why:
        return why, None, None
    shown, minima = presence.shown_classes(tm)
    return why, shown, minima


def _parameters(tm: ThreatModel) -> int:
    """The model's parameter count (client-fit runs only up to CLIENT_FIT_MAX_PARAMETERS)."""
    return sum(p.numel() for p in tm.model.parameters())


def _with_aux(tm: ThreatModel, session: Session, method: type[LabelMethod]) -> Session:
    """The session a candidate runs with: Gaussian dummies for a method that takes aux data when none was given."""
    if session.aux is None and method.aux in ("optional", "labelled"):
        return session.replace(aux=_probe_aux(tm, session))
    return session


def _batch_statistics(tm: ThreatModel) -> bool:
    """Whether the clients normalise with BatchNorm batch statistics (train mode, and the model has BatchNorm)."""
    return tm.train_bn and tm.has_batchnorm


def _input_independent(spread: float | None) -> bool:
    """Whether the model gives every input (nearly) the same softmax (spread below INPUT_INDEPENDENT): RLU's model of
    the output layer is then exact."""
    return spread is not None and spread < INPUT_INDEPENDENT


def _negative_entries(tm: ThreatModel) -> int:
    """How many output-bias-gradient entries are negative (0 where the update has no bias gradient)."""
    gb = tm.final_bias_grad
    return int((gb < 0).sum()) if gb is not None else 0


def _run_each(tm: ThreatModel, session: Session, names: tuple[str, ...], options: dict | None = None):
    """Run every applicable method of ``names`` (``options``: {name: that method's options}): [(name, result, session
    it ran with, seconds)] and {name: why not}."""
    runs: list[tuple[str, LabelResult, Session, float]] = []
    skipped: dict[str, str] = {}
    for name in names:
        method = LABEL_METHODS.get(name)
        sub = _with_aux(tm, session, method)
        why = method.why_not(tm, sub)
        if why:
            skipped[name] = "; ".join(why)
            continue
        t0 = time.perf_counter()
        try:
            result = method((options or {}).get(name)).run(tm, sub)
        except (NotApplicable, ValueError) as exc:
            skipped[name] = str(exc)
            continue
        runs.append((name, result, sub, time.perf_counter() - t0))
    return runs, skipped


def _all_in_class(counts: torch.Tensor, cls: int, sub: Session, seconds: float) -> tuple:
    """A run (as ``_run_each`` gives) named "one class" that puts every one of ``counts``' samples on class ``cls``."""
    one = torch.zeros_like(counts)
    one[cls] = int(counts.sum())
    return "one class", LabelResult(one.double(), one), sub, seconds


def _bn_one_class(tm: ThreatModel, run) -> tuple | None:
    """bn-count's run where the output bias gradient has exactly one negative entry and bn-count puts at least
    ONE_CLASS_SHARE of the batch on that entry's class: both channels name the same single class, and the whole batch
    goes to it (bn-count spreads a sample or two of a single-class batch over other classes); else None."""
    gb = tm.final_bias_grad
    counts = run[1].counts_int
    top = int(torch.argmax(counts))
    if gb is None or int((gb < 0).sum()) != 1 or float(gb[top]) >= 0 \
            or float(counts[top]) < ONE_CLASS_SHARE * float(counts.sum()):
        return None
    return _all_in_class(counts, top, run[2], run[3])


def _distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Total-variation distance between two count vectors' class shares."""
    a, b = a.double(), b.double()
    return 0.5 * float((a / a.sum() - b / b.sum()).abs().sum())


def ensemble_counts(vectors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean of integer count vectors (float) and its projection onto integers summing to their (common) total
    (``integer_counts``: largest fractional parts)."""
    stack = torch.stack([v.double() for v in vectors])
    mean = stack.mean(0)
    return mean, integer_counts(mean, int(round(float(stack.sum(1).mean()))))


def _candidate_counts(result: LabelResult, name: str) -> list[int] | None:
    """The counts method ``name`` gave as one of ``result``'s reported candidates, or None."""
    return next((c["counts"] for c in result.diagnostics.get("candidates", []) if c.get("method") == name), None)


def _candidates(tm: ThreatModel, session: Session, spread: float | None):
    """(name, method class, session) in the rules' order of preference."""
    single = tm.batch_size == 1 and tm.meta.local_steps == 1
    order: tuple[str, ...] = ("idlg",) if single else ()
    order += UNTRAINED if spread is None or spread < SPREAD_THRESHOLD else TRAINED
    for name in order:
        method = LABEL_METHODS.get(name)
        yield name, method, _with_aux(tm, session, method)


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
                     "bn-count on trained models' one-step uploads with BN buffers, LLG on "
                     "few classes, bias-count on many classes of a trained model (three: bias-count or LLG by how much of "
                     "the batch bias-count puts on the positive entries), "
                     "client-fit (models without batch-statistics BatchNorm) or the "
                     "ensemble on other FedAvg deltas (bn-count first on BN buffers' mixtures it explains), "
                     "evidence elsewhere",
                     ("hybrid", "evidence", "rules", "ensemble")),
        MethodOption("bn-aux-batches", str, "by-steps", "hybrid, FedAvg deltas with BN buffers: how bn-count's route "
                     "normalises the aux images (bn-count's --aux-batches; by-steps: matched from 4 local steps, "
                     "mixture below; mixture: the earlier, cheaper reading)",
                     ("by-steps", "matched", "simulated", "mixture")),
        MethodOption("shown-mean-steps", int, SHOWN_MEAN_STEPS, "hybrid, FedAvg deltas of BN models that show at most "
                     f"{FEW_SHOWN} classes: up to this many local steps the shown classes are split by the mean of the "
                     "BN reading and bias-count (0: the BN reading alone)"),
    )

    @classmethod
    def why_not(cls, tm: ThreatModel, session: Session | None = None) -> list[str]:
        session = session or Session()
        reasons = []
        for name, method, sub in _candidates(tm, session, None):
            why = method.why_not(tm, sub)
            if not why:
                return []
            reasons.append(f"{name}: {'; '.join(why)}")
        return ["no label method applies (" + " | ".join(reasons) + ")"]

    def run(self, tm: ThreatModel, session: Session) -> LabelResult:
        notes: dict = {}  # what a route tried and left, reported beside the chosen one
        with shared_head_passes():  # the methods it runs probe the head with the same images: one pass each
            result = self._choose(tm, session, notes)
            if self.opt("strategy") == "hybrid" and tm.meta.local_steps > 1 and tm.final_layer is not None:
                result = self._by_shown_on_delta(tm, session, result, notes)
        result.diagnostics.update(notes)
        return result

    def _choose(self, tm: ThreatModel, session: Session, notes: dict) -> LabelResult:
        spread, min_feature = _probe_head(tm, session) if tm.final_layer else (None, None)
        exact = (tm.batch_size == 1 and tm.meta.local_steps == 1) or tm.final_layer is None \
            or tm.final_weight_grad is None and tm.final_bias_grad is None
        rules_exact = tm.meta.local_steps == 1 and spread is not None and spread < SPREAD_THRESHOLD
        strategy = self.opt("strategy")
        if strategy == "hybrid":
            if rules_exact and (tm.batch_size or 0) > 1:
                result = self._by_integrality(tm, session, spread)
                if result is not None:
                    return result
            if not rules_exact and not exact:
                result = self._by_hidden_split(tm, session, spread, notes)
                if result is not None:
                    return result
                result = self._by_sample_split(tm, session, spread, notes)
                if result is not None:
                    return self._by_one_shown_class(tm, session, result, min_feature)
                rejected = None  # bn-count's reading of a BN mixture that failed its checks
                if tm.meta.local_steps > 1 and _batch_statistics(tm) and not _input_independent(spread):
                    result, rejected = self._by_bn_mixture(tm, session, spread, notes)
                    if result is not None:
                        return result
                result = self._by_class_count(tm, session, spread, rejected)
                if result is not None:
                    return self._by_shown_classes(tm, session, spread, result, min_feature=min_feature)
            if tm.meta.local_steps > 1 and not _batch_statistics(tm) and not exact:
                result = self._by_client_fit(tm, session, spread)
                if result is not None:
                    return result
            if tm.meta.local_steps > 1 and _batch_statistics(tm) and _input_independent(spread) and not exact:
                result = self._by_rlu_input_independent(tm, session, spread)
                if result is not None:
                    return result
            strategy = "rules" if rules_exact else "ensemble" if tm.meta.local_steps > 1 else "evidence"
        if strategy == "ensemble" and not exact:
            result = self._by_ensemble(tm, session, spread)
            if result is not None:
                return result
            strategy = "evidence"  # fewer than two members apply
        if strategy == "evidence" and not exact:
            result = self._by_evidence(tm, session, spread)
            if result is not None:
                return self._by_shown_classes(tm, session, spread, result, min_feature=min_feature) \
                    if self.opt("strategy") == "hybrid" else result
        return self._by_rules(tm, session, spread)

    def _by_rules(self, tm: ThreatModel, session: Session, spread: float | None) -> LabelResult:
        for name, method, sub in _candidates(tm, session, spread):
            if not method.why_not(tm, sub):
                chosen = method()
                result = chosen.run(tm, sub)
                result.diagnostics = {"chosen": name, "strategy": "rules", **self._regime(spread),
                                      "chosen_options": chosen.opts, "aux": sub.aux.kind if sub.aux else None,
                                      **result.diagnostics}
                return result
        self.check_applicable(tm, session)
        raise AssertionError("unreachable")

    def _by_integrality(self, tm: ThreatModel, session: Session, spread: float | None) -> LabelResult | None:
        """One step, input-independent outputs (random init): bias-count, ZLG and iLRG are each near exact, on
        different assumptions (bias-count, ZLG: every sample gets the same softmax; iLRG: each class's samples share
        one embedding). A method whose assumption holds on this batch lands its raw counts near its integer counts,
        one whose assumption fails lands between them. The rules' choice (bias-count) is kept unless another
        candidate's distance (sum of |raw - integer count|) is at most MARGIN times its own; then the closest wins.
        On 96 seeded B = 4 batches of a DLG-init LeNet with 500 aux digits the rules missed a sample in 4 batches
        and this rule in none (tests/test_rlu.py holds one seed of it); without the margin a close call (0.78 against
        0.85) chose a wrong iLRG on a 4-digit weights upload."""
        runs, _ = _run_each(tm, session, UNTRAINED[:3])  # bias-count, zlg, ilrg
        if len(runs) < 2:
            return None
        scores = [float((r.counts - r.counts_int).abs().sum()) for _, r, _, _ in runs]
        best = min(range(len(runs)), key=lambda i: (round(scores[i], 6), i))
        if scores[best] > MARGIN * scores[0]:  # not clearly closer than the rules' choice: keep the rules' choice
            best = 0
        name, result, sub, _ = runs[best]
        result.diagnostics = {"chosen": name, "strategy": "rules, by integrality", **self._regime(spread),
                              "aux": sub.aux.kind if sub.aux else None,
                              "candidates": [{"method": n, "distance_to_integers": sc, "counts": r.counts_int.tolist()}
                                             for (n, r, _, _), sc in zip(runs, scores)],
                              **result.diagnostics}
        return result

    def _by_bn_mixture(self, tm: ThreatModel, session: Session, spread: float | None,
                       notes: dict) -> tuple[LabelResult | None, tuple | None]:
        """A FedAvg delta (K > 1) whose BN buffers hold the mixture of the K batches' statistics, with labelled aux
        images (at least MIN_AUX_PER_CLASS per class): bn-count reads the mixture as one batch of B K samples. Kept
        where its counts explain the mixture to a relative residual below MIXTURE_MAX_RESIDUAL and the model moved
        less than MIXTURE_MAX_CHANGE of its norm (then the aux moments at one model along the update stand for
        every step's; the residual alone passed momentum-0.9 clients it got badly wrong). On 36 held-out trained BN
        ConvNet clients it fired on 29 and gained 11.5 +- 2.6 points over the route below there
        (docs/results/labels.md, "bn-count on FedAvg deltas"); where it names the bias gradient's one negative
        class (``_bn_one_class``), the whole client is that class. Otherwise its counts, residual and change are noted
        and the route goes on (``_doubts_one_class`` may still take them). Returns (the routed result or None,
        bn-count's rejected run as ``_run_each`` gives it, or None)."""
        from fedaudit.labels.bn_count import too_few_aux  # here: keeps the registry's order

        if session.aux is None or session.aux.labels is None:
            return None, None
        few = too_few_aux(session)
        if few:
            notes["bn_count_skipped"] = few
            return None, None
        runs, skipped = _run_each(tm, session, ("bn-count",), {"bn-count": {"aux-batches": self.opt("bn-aux-batches")}})
        if not runs:
            notes["bn_count_skipped"] = skipped.get("bn-count", "not applicable")
            return None, None
        d = runs[0][1].diagnostics
        fit = {"bn_count_fit": {k: d[k] for k in ("relative_residual", "relative_change", "aux_batches")}}
        # the one-class call reads the aux images under the mixture's statistics (as ONE_CLASS_SHARE was chosen):
        # the matched reading, better elsewhere, spread 2 of 6 held-out one-class clients to 75-80% on their class
        # (docs/results/labels.md, "bn-count's aux images in simulated batches"); then the matched one's call
        for run in self._mixture_reading(tm, session, runs[0]) + ([runs[0]] if not d["mixture_doubts"] else []):
            single = _bn_one_class(tm, run)
            if single is not None:
                how = run[1].diagnostics.get("aux_batches")
                return self._routed(single, "hybrid, one class (BN mixture)", spread, 1,
                                    {"bn_count_counts": run[1].counts_int.tolist(), "multi_step_aware": True,
                                     "bn_count_fit": {**fit["bn_count_fit"], "one_class_reading": how}}), None
        if not d["mixture_doubts"]:
            near = self._by_near_aux_mix(tm, session, spread, runs[0])
            if near is not None:
                near.diagnostics.update(fit)
                return near, None
            return self._routed(runs[0], "hybrid, BN statistics (mixture of the local batches)", spread,
                                _negative_entries(tm), fit), None
        notes["bn_count_rejected"] = {"counts": runs[0][1].counts_int.tolist(),
                                      "relative_residual": float(d["relative_residual"]),
                                      "relative_change": d["relative_change"], "aux_batches": d["aux_batches"],
                                      "why": "; ".join(d["mixture_doubts"])}
        return None, runs[0]

    @staticmethod
    def _mixture_reading(tm: ThreatModel, session: Session, run) -> list:
        """bn-count's reading with the aux images under the BN mixture's statistics (``--aux-batches mixture``) where
        ``run`` read them otherwise, the one-class call can fire (one negative output-bias entry) and it passes its
        checks: [that run], else []."""
        if run[1].diagnostics.get("aux_batches") in (None, "mixture") or _negative_entries(tm) != 1:
            return []
        runs, _ = _run_each(tm, session, ("bn-count",), {"bn-count": {"aux-batches": "mixture"}})
        return [r for r in runs if not r[1].diagnostics["mixture_doubts"]]

    def _by_near_aux_mix(self, tm: ThreatModel, session: Session, spread: float | None, run) -> LabelResult | None:
        """bn-count's accepted reading of a BN mixture that lies within NEAR_AUX_TV (total variation) of the aux set's
        class mix: the mean of its counts and bias-count's, whose one assumption (a batch composed like the aux set)
        then holds and whose counts are less noisy than a reading of B K samples' moments. None elsewhere."""
        assert session.aux is not None and session.aux.labels is not None
        counts = run[1].counts_int
        distance = _distance(counts, torch.bincount(session.aux.labels.long().flatten(),
                                                    minlength=counts.numel())[:counts.numel()])
        if distance >= NEAR_AUX_TV:
            return None
        bias_count, _ = _run_each(tm, session, ("bias-count",))
        result = self._ensemble_of([run] + bias_count, {}, spread)
        if result is None:
            return None
        result.diagnostics.update(strategy="hybrid, BN statistics and bias-count (near the aux mix)",
                                  distance_to_aux_mix=distance, negative_bias_entries=_negative_entries(tm))
        return result

    def _by_agreement(self, tm: ThreatModel, session: Session, spread: float | None, negative: int, rejected: tuple,
                      route: tuple) -> tuple[LabelResult | None, float | None]:
        """The many-classes route's bias-count run (``route``) on a FedAvg delta whose BN-mixture reading by bn-count
        was rejected (``rejected``): where that reading and LLG's lie within AGREE_TV (total variation) of each other,
        the mean of the three count vectors (a skewed client, which bias-count reads as spread like the aux set).
        Returns (that result or None, the readings' distance; None where LLG does not apply)."""
        llg, _ = _run_each(tm, session, ("llg",))
        if not llg:
            return None, None
        distance = _distance(rejected[1].counts_int, llg[0][1].counts_int)
        if distance >= AGREE_TV:
            return None, distance
        result = self._ensemble_of([rejected, llg[0], route], {}, spread)
        assert result is not None  # three runs: the ensemble always forms
        result.diagnostics.update(strategy="hybrid, many classes (BN reading and LLG agree)",
                                  readings_distance=distance, negative_bias_entries=negative)
        return result, distance

    @staticmethod
    def _doubts_one_class(rejected: tuple | None, claimed: int) -> bool:
        """Whether bn-count's rejected reading of a FedAvg delta's BN mixture (``rejected``, None where there is none),
        which weighs every local step's batch, doubts a one-class reading of ``claimed`` from the output layer, whose
        update shows mostly the last steps' batches: it puts less than DOUBT_SHARE of the batch on that class, with
        the model moving less than DOUBT_MAX_CHANGE of its norm (a non-IID client whose batches come one class after
        another)."""
        if rejected is None:
            return False
        change = rejected[1].diagnostics.get("relative_change")
        counts = rejected[1].counts_int
        return change is not None and change < DOUBT_MAX_CHANGE \
            and float(counts[claimed]) < DOUBT_SHARE * float(counts.sum())

    def _by_class_count(self, tm: ThreatModel, session: Session, spread: float | None,
                        rejected: tuple | None = None) -> LabelResult | None:
        """Several local steps or trained-like outputs, routed by the number of negative output-bias-gradient entries
        (on a trained DLG LeNet every negative entry is a present class and 79% of present classes are negative):
        * at most FEW_CLASSES: LLG (it led RLU, which the evidence follows, on such batches); on trained-like outputs
          with one negative entry, LLG putting at least ONE_CLASS_SHARE of the batch on that class and HFGI all of
          it, the whole batch goes to it (``_one_class``);
        * at least MANY_CLASSES on trained-like outputs: bias-count (a batch spread like the aux set, where RLU's
          least squares is ill-conditioned because the model is sure: S near I); on a FedAvg delta whose BN reading
          was rejected (``rejected``), the mean with that reading and LLG's where those two agree (``_by_agreement``);
        * exactly FEW_CLASSES + 1 on trained-like outputs, one local step: bias-count or LLG by the share of the batch
          bias-count puts on the positive entries' classes (``_by_invisible_share``);
        * but first, on trained-like outputs: bn-count wherever it applies (a one-step upload with BN buffers and
          labelled aux images, at least MIN_AUX_PER_CLASS in each class the aux set has), which reads the counts from
          the BN statistics that sure samples move as much as any other (docs/results/labels.md, "BN statistics"),
          unless the bias gradient shows one class and bn-count puts at least ONE_CLASS_SHARE of the batch on one
          class: a single-class batch, where bn-count spreads a sample or two over other classes. If bn-count's
          class is the negative entry's, the whole batch is that class ("one class"); otherwise LLG.
        Anything else: None (docs/results/labels.md, "Many classes")."""
        gb = tm.final_bias_grad
        if gb is None:
            return None
        negative = int((gb < 0).sum())
        trained = spread is not None and spread >= SPREAD_THRESHOLD
        extra: dict = {}
        from fedaudit.labels.bn_count import too_few_aux  # here: keeps the registry's order

        few_aux = too_few_aux(session)
        if trained and negative > 0 and few_aux and not LABEL_METHODS.get("bn-count").why_not(tm, session):
            extra["bn_count_skipped"] = few_aux
        elif trained and negative > 0 and tm.meta.local_steps == 1:  # K > 1: _by_bn_mixture
            runs, _ = _run_each(tm, session, ("bn-count",))  # empty where bn-count does not apply
            if runs:
                counts = runs[0][1].counts_int
                if negative > 1 or float(counts.max()) < ONE_CLASS_SHARE * float(counts.sum()):
                    return self._routed(runs[0], "hybrid, BN statistics", spread, negative, {})
                extra = {"bn_count_counts": counts.tolist()}
                single = _bn_one_class(tm, runs[0])
                if single is not None:
                    return self._routed(single, "hybrid, one class", spread, negative, extra)
        if 0 < negative <= FEW_CLASSES:
            method, strategy = "llg", "hybrid, few classes"
        elif negative >= MANY_CLASSES and trained:
            method, strategy = "bias-count", "hybrid, many classes"
        elif negative == FEW_CLASSES + 1 and trained and tm.meta.local_steps == 1:
            return self._by_invisible_share(tm, session, spread, gb, negative, extra)
        else:
            return None
        runs, _ = _run_each(tm, session, (method,))
        if not runs:
            return None
        if method == "bias-count" and rejected is not None:
            agreed, distance = self._by_agreement(tm, session, spread, negative, rejected, runs[0])
            if agreed is not None:
                return agreed
            extra["readings_distance"] = distance
        if trained and negative == 1 and "bn_count_counts" not in extra:
            single = self._one_class(tm, session, runs[0], gb)
            if single is not None and self._doubts_one_class(rejected, int(torch.argmax(single[0][1].counts_int))):
                return self._routed(rejected, "hybrid, BN statistics (one class doubted)", spread, negative,
                                    {"one_class_counts": single[0][1].counts_int.tolist()})
            if single is not None:
                return self._routed(single[0], "hybrid, one class", spread, negative, {**extra, **single[1]})
        return self._routed(runs[0], strategy, spread, negative, extra)

    def _by_sample_split(self, tm: ThreatModel, session: Session, spread: float | None,
                         notes: dict) -> LabelResult | None:
        """A one-step upload of a batch smaller than the class count (B < C), of a model with trained-like outputs, with
        aux images: sample-split, which splits the output layer's update into its B samples (one feature and one
        label each) instead of reading per-class error masses, where the count methods lose most (trained models'
        random batches of 8: 56-81% by the routes below; docs/results/labels.md, "sample-split"). Kept where its fit
        reproduces the update to within SPLIT_MAX_FIT (its label search found a labelling that explains it); else
        None, and the routes below run (its fit and counts are reported as ``sample_split``). It goes before the
        one-class route (LLG and HFGI agreeing on one class): on batches of 8 that route read 9 of 17 7/1 batches as
        8/0 where the split was exact on 7 of them, and the split misses one sample of 3 of 12 8/0 batches
        (docs/results/labels.md, "sample-split")."""
        if tm.meta.local_steps != 1 or not 1 < (tm.batch_size or 0) < tm.spec.num_classes:
            return None
        return self._split_route(tm, session, spread, notes, "sample-split", "fit",
                                 lambda fit: not fit > SPLIT_MAX_FIT)

    def _by_hidden_split(self, tm: ThreatModel, session: Session, spread: float | None,
                         notes: dict) -> LabelResult | None:
        """A one-step upload of a model with trained-like outputs and a hidden linear layer wider than the batch (ReLU
        inputs, ReLU/Linear layers after it), with aux images: hidden-split, which verifies samples one by one in that
        layer's update (exact labels, any B up to its width), for B <= HIDDEN_MAX_BATCH. Kept where it verified at
        least HIDDEN_MIN_RESOLVED of the batch (the rest take the verified samples' class mix); else None and the
        routes below run, its counts reported as ``hidden_split`` (docs/results/labels.md, "hidden-split")."""
        b = tm.batch_size or 0
        if tm.meta.local_steps != 1 or not 2 <= b <= HIDDEN_MAX_BATCH:
            return None
        return self._split_route(tm, session, spread, notes, "hidden-split", "resolved",
                                 lambda resolved: resolved >= HIDDEN_MIN_RESOLVED * b)

    def _split_route(self, tm: ThreatModel, session: Session, spread: float | None, notes: dict, method: str,
                     key: str, keep) -> LabelResult | None:
        """Run a split method; its result is returned ("hybrid, <method without the dash>") where ``keep`` holds for
        its ``key`` diagnostic, else that diagnostic and its counts are noted (``notes[<method>]``) and None."""
        runs, _ = _run_each(tm, session, (method,))
        if not runs:
            return None
        value = runs[0][1].diagnostics[key]
        if not keep(value):
            notes[method.replace("-", "_")] = {key: value, "counts": runs[0][1].counts_int.tolist(), "kept": False}
            return None
        return self._routed(runs[0], "hybrid, " + method.replace("-", " "), spread, _negative_entries(tm), {})

    def _by_invisible_share(self, tm: ThreatModel, session: Session, spread: float | None, gb: torch.Tensor,
                            negative: int, extra: dict) -> LabelResult | None:
        """A trained-like model's one-step update with FEW_CLASSES + 1 negative output-bias entries: bias-count where it
        puts more than INVISIBLE_SHARE of the batch on the classes with a positive entry (a batch of many classes
        whose sure samples hide their error mass), else LLG (a batch of about three classes)."""
        runs, _ = _run_each(tm, session, ("bias-count",))
        if not runs:
            return None
        counts = runs[0][1].counts_int
        share = float(counts[gb > 0].sum()) / max(float(counts.sum()), 1.0)
        extra = {**extra, "bias_count_share_on_positive": share}
        if share > INVISIBLE_SHARE:
            return self._routed(runs[0], "hybrid, mostly invisible", spread, negative, extra)
        llg, _ = _run_each(tm, session, ("llg",))
        if not llg:
            return None
        return self._routed(llg[0], "hybrid, three classes", spread, negative, extra)

    @staticmethod
    def _one_class(tm: ThreatModel, session: Session, llg, gb: torch.Tensor) -> tuple[tuple, dict] | None:
        """A trained-like model's update whose bias gradient has one negative entry, on whose class LLG puts at least
        ONE_CLASS_SHARE of the batch and HFGI the whole batch: the readings name one class, and the whole batch goes
        to it. LLG's estimate leaves a sample or two on other classes of a single-class batch (94-98% on the
        benchmark's single-class cells of B >= 16, HFGI 100); where a second class hides behind the one negative
        entry, HFGI finds it more often than LLG (docs/results/labels.md, "One class without BN buffers"). The route
        and LLG's and HFGI's counts, or None where they do not agree on one class."""
        _, result, sub, seconds = llg
        counts = result.counts_int
        top = int(torch.argmin(gb))
        if int(torch.argmax(counts)) != top or float(counts[top]) < ONE_CLASS_SHARE * float(counts.sum()):
            return None
        runs, _ = _run_each(tm, session, ("hfgi",))
        if not runs or int(runs[0][1].counts_int[top]) != int(counts.sum()):
            return None
        extra = {"llg_counts": counts.tolist(), "hfgi_counts": runs[0][1].counts_int.tolist()}
        return _all_in_class(counts, top, sub, seconds + runs[0][3]), extra

    def _by_shown_classes(self, tm: ThreatModel, session: Session, spread: float | None,
                          result: LabelResult, min_feature: float | None = None) -> LabelResult:
        """A trained-like model's one-step update after the count routes (FedAvg deltas: ``_by_shown_on_delta``): the
        classes whose output-weight-gradient row has a negative entry are present for certain
        (fedaudit/labels/presence.py). Where at most FEW_SHOWN are shown, the batch is read as those classes only:
        the mean of the SHOWN_MEMBERS' counts, each projected onto them (a count method spreads a few-class batch over
        absent classes); where more are shown, a route that read the batch as a few-class one (LLG, by at most three
        negative bias entries) gives way to bias-count, and every shown class gets at least one sample. Not after the
        routes that read BN buffers (not measured) or where the test cannot be read (the reason is reported in
        ``shown_classes``)."""
        d = result.diagnostics
        if tm.meta.local_steps != 1 or d.get("strategy") == "hybrid, BN statistics" or "bn_count_counts" in d:
            return result  # deltas and the BN routes: not measured

        def few(shown: torch.Tensor, info: dict) -> LabelResult | None:
            runs, skipped = _run_each(tm, session, SHOWN_MEMBERS)
            if not runs:
                return None
            projected = [presence.project(r.counts_int, shown) for _, r, _, _ in runs]
            mean, counts = ensemble_counts(projected)
            return LabelResult(mean.float(), counts, {
                "chosen": "shown-classes ensemble", "strategy": "hybrid, few shown classes", **self._regime(spread),
                "negative_bias_entries": _negative_entries(tm), "shown_classes": info,
                "members": [n for n, _, _, _ in runs],
                "candidates": [{"method": n, "counts": r.counts_int.tolist(), "projected": v.tolist(),
                                "seconds": round(t, 3)} for (n, r, _, t), v in zip(runs, projected)],
                "not_run": skipped}, result.warnings)

        return self._with_shown(tm, session, spread, result, min_feature, few)

    def _with_shown(self, tm: ThreatModel, session: Session, spread: float | None, result: LabelResult,
                    min_feature: float | None, few, reroute: str | None = "bias-count") -> LabelResult:
        """The shown-classes step around ``few(shown, info)``, the answer where at most FEW_SHOWN classes are shown
        (None: go on): where more are shown, a route that read the batch as a few-class one (LLG) gives way to
        ``reroute`` (the many-classes route's method; None: no reroute); every shown class gets at least one sample.
        The classes, each row's relative minimum and the route's answer (``before``) go to
        ``diagnostics.shown_classes``, or why the test cannot be read."""
        d = result.diagnostics
        why, shown, minima = _shown(tm, session, min_feature)
        if shown is None or minima is None:
            d["shown_classes"] = {"not_applicable": "; ".join(why)}
            return result
        total, n = int(result.counts_int.sum()), int(shown.sum())
        info: dict = {"classes": torch.nonzero(shown).flatten().tolist(), "row_minima": [float(v) for v in minima],
                      "before": {"chosen": d.get("chosen"), "strategy": d.get("strategy"),
                                 "counts": result.counts_int.tolist()}}
        if n > total:  # cannot be: the update is not what the test assumes
            d["shown_classes"] = {**info, "ignored": f"{n} classes shown for {total} samples"}
            return result
        if n <= FEW_SHOWN:
            answer = few(shown, info)
            if answer is not None:
                return answer
        elif reroute and d.get("chosen") == "llg" \
                and d.get("strategy") in ("hybrid, few classes", "hybrid, three classes"):
            runs, _ = _run_each(tm, session, (reroute,))
            if runs:
                info["rerouted"] = f"more classes shown than the route's few-class reading: {reroute}"
                result = self._routed(runs[0], d["strategy"] + ", rerouted by shown classes", spread,
                                      _negative_entries(tm), {})
        floored = presence.floor(result.counts_int, shown)
        if not torch.equal(floored, result.counts_int):
            info["floored"] = True
            result.counts_int = floored
        result.diagnostics["shown_classes"] = info
        return result

    @staticmethod
    def _bn_reading(result: LabelResult, notes: dict) -> torch.Tensor | None:
        """bn-count's reading of a FedAvg delta's BN mixture where a route ran it: rejected (``notes``), the one-class
        routes' (``bn_count_counts``), or the accepted one (chosen, or a member of the near-aux-mix mean); else None."""
        d = result.diagnostics
        counts = notes.get("bn_count_rejected", {}).get("counts") or d.get("bn_count_counts") \
            or _candidate_counts(result, "bn-count")
        if counts is None and d.get("chosen") == "bn-count":
            return result.counts_int.clone()
        return None if counts is None else torch.tensor(counts)

    def _by_shown_on_delta(self, tm: ThreatModel, session: Session, result: LabelResult, notes: dict) -> LabelResult:
        """A FedAvg delta, after its routes: the classes the output layer's weight update shows present for certain
        (presence.py: a delta of SGD, with or without momentum and without weight decay, is a positive combination of
        gradients, so the test holds). A K-step client rarely holds a sure sample of every step, and on the test
        models' trained-ConvNet and LeNet clients of 4-8 steps the test showed no absent class. Where at most
        FEW_SHOWN classes are shown, the counts are a reading that weighs every step's batch, projected onto them
        (the output layer shows mostly the last steps': a two-class client in class order reads as its second class
        there, and LLG, the few-class route, follows it); else the route's counts projected. Where more are shown
        and the route read a few-class batch (LLG), the many-classes route's method; every shown class gets at least
        one sample. The multi-step reading, by model:

        * BatchNorm with batch statistics: bn-count's reading of the BN mixture (accepted or rejected; the route's
          counts where bn-count did not run), up to SHOWN_MEAN_STEPS local steps averaged with bias-count's counts
          on the shown classes (both readings go to ``shown_classes``); more shown: bias-count (held out on another trained ConvNet: two-class
          clients 67.9 -> 88.4%, the others unchanged; docs/results/labels.md, "Shown classes on FedAvg deltas"; at
          random init, "Shown classes on the BN ConvNet at random init");
        * other models: client-fit's counts (the route's own where it ran); more shown: client-fit
          (docs/results/labels.md, "Shown classes on the LeNets' deltas").

        Where the outputs do not depend on the input (spread below INPUT_INDEPENDENT) RLU's model is exact and its
        route is kept; the step runs there after the other routes only (LLG's few classes: the PyTorch-init LeNet's
        two-class clients; docs/results/labels.md, "Shown classes on the LeNets' deltas")."""
        d = result.diagnostics
        spread = d.get("softmax_spread")
        bn = _batch_statistics(tm)
        if spread is None or spread < INPUT_INDEPENDENT and d.get("chosen") == "rlu":
            return result
        fits = not bn and _parameters(tm) <= CLIENT_FIT_MAX_PARAMETERS

        def few(shown: torch.Tensor, info: dict) -> LabelResult | None:
            if not bool(shown.any()):
                return None
            reading, name = (self._bn_reading(result, notes), "bn-count") if bn \
                else (self._fit_reading(tm, session, result, fits), "client-fit")
            counts = presence.project(reading if reading is not None else result.counts_int, shown)
            source = ("BN reading" if bn else "client-fit") if reading is not None else "route's counts"
            if bn and reading is not None:
                info["bn_reading"] = counts.tolist()
                bias = self._shown_mean_partner(tm, session, result) \
                    if tm.meta.local_steps <= self.opt("shown-mean-steps") else None
                if bias is not None:
                    partner = presence.project(bias, shown)
                    info["bias_count"] = partner.tolist()
                    counts = presence.project(ensemble_counts([counts, partner])[1], shown)
                    source = "BN reading and bias-count"
            if torch.equal(counts, result.counts_int):
                return None
            return LabelResult(counts.float(), counts, {
                "chosen": name if reading is not None else d.get("chosen"),
                "strategy": f"hybrid, few shown classes on a delta ({source})", **self._regime(spread),
                "negative_bias_entries": _negative_entries(tm), "shown_classes": info,
                "multi_step_aware": reading is not None or bool(d.get("multi_step_aware"))}, result.warnings)

        return self._with_shown(tm, session, spread, result, None, few,
                                "bias-count" if bn else "client-fit" if fits else None)

    @staticmethod
    def _shown_mean_partner(tm: ThreatModel, session: Session, result: LabelResult) -> torch.Tensor | None:
        """bias-count's counts for the shown-classes mean: the route's candidate where it ran, else a run of it (None
        where it does not apply)."""
        ran = _candidate_counts(result, "bias-count")
        if ran is not None:
            return torch.tensor(ran)
        runs, _ = _run_each(tm, session, ("bias-count",))
        return runs[0][1].counts_int.clone() if runs else None

    @staticmethod
    def _fit_reading(tm: ThreatModel, session: Session, result: LabelResult, fits: bool) -> torch.Tensor | None:
        """client-fit's counts of a FedAvg delta: the route's where it chose client-fit, else a run of it (None where
        it does not apply: no labelled aux images, or ``fits`` False: a model above CLIENT_FIT_MAX_PARAMETERS)."""
        if result.diagnostics.get("chosen") == "client-fit":
            return result.counts_int.clone()
        if not fits:
            return None
        runs, _ = _run_each(tm, session, ("client-fit",))
        return runs[0][1].counts_int.clone() if runs else None

    def _by_one_shown_class(self, tm: ThreatModel, session: Session, result: LabelResult,
                            min_feature: float | None) -> LabelResult:
        """sample-split's result where the update shows exactly one class (presence.py) and the split put samples
        elsewhere: every sample to the shown class. On the label benchmark's trained LeNets and ConvNet (trials 0-5,
        216 batches) only single-class batches showed one class, while the split misses a sample of some of them
        (docs/results/labels.md, "One shown class after sample-split"); a hidden minority (1 of 8 trained-LeNet 7/1
        batches of 8) would cost its sample, as the split's misses do."""
        _, shown, _ = _shown(tm, session, min_feature)
        if shown is None or int(shown.sum()) != 1 or bool((result.counts_int[~shown] == 0).all()):
            return result
        before = result.counts_int.tolist()
        result.counts_int = torch.where(shown, result.counts_int.sum(), 0).to(result.counts_int.dtype)
        result.counts = result.counts_int.to(result.counts.dtype)
        result.diagnostics["strategy"] += ", one shown class"
        result.diagnostics["shown_classes"] = {"classes": torch.nonzero(shown).flatten().tolist(),
                                               "before": {"counts": before}}
        return result

    def _routed(self, run, strategy: str, spread: float | None, negative: int, extra: dict) -> LabelResult:
        name, result, sub, _ = run
        result.diagnostics = {"chosen": name, "strategy": strategy, **self._regime(spread),
                              "negative_bias_entries": negative, "aux": sub.aux.kind if sub.aux else None,
                              **extra, **result.diagnostics}
        return result

    def _by_client_fit(self, tm: ThreatModel, session: Session, spread: float | None) -> LabelResult | None:
        """A FedAvg delta (K > 1) of a model whose BatchNorm (if any) did not normalise with batch statistics, not
        routed by its class count: client-fit, which fits each step's class mix so that a client simulated on the aux
        images reproduces the whole update (docs/results/labels.md, "client-fit"), except on a model whose outputs do
        not depend on the input (softmax spread below INPUT_INDEPENDENT): RLU; on a model of more than
        CLIENT_FIT_MAX_PARAMETERS the earlier route (RLU if its residual is below RLU_MAX_RESIDUAL, else the ensemble);
        the ensemble where neither can run.
        The ensemble's members run too: their counts, and RLU's least-squares residual, are reported. None where
        neither applies."""
        runs, skipped = _run_each(tm, session, ENSEMBLE)
        ensemble = self._ensemble_of(runs, skipped, spread)
        rlu = next((run for run in runs if run[0] == "rlu"), None)
        negative = _negative_entries(tm)
        candidates = [{"method": n, "counts": r.counts_int.tolist(), "seconds": round(t, 3)} for n, r, _, t in runs]
        extra = {"ensemble_counts": ensemble.counts_int.tolist() if ensemble is not None else None,
                 "rlu_residual": float(rlu[1].diagnostics["residual"]) if rlu is not None else None,
                 "candidates": candidates, "not_run": skipped}
        if rlu is not None and spread is not None and spread < INPUT_INDEPENDENT:
            return self._routed(rlu, "hybrid, RLU on a delta (input-independent outputs)", spread, negative, extra)
        if ensemble is not None and rlu is not None:
            ensemble.diagnostics["rlu_residual"] = extra["rlu_residual"]
        size = _parameters(tm)
        if size > CLIENT_FIT_MAX_PARAMETERS:  # the earlier route
            if rlu is not None and extra["rlu_residual"] < RLU_MAX_RESIDUAL:
                return self._routed(rlu, "hybrid, RLU on a delta", spread, negative, extra)
            if ensemble is not None:
                ensemble.diagnostics["client_fit_skipped"] = f"{size} parameters > {CLIENT_FIT_MAX_PARAMETERS}"
                if rlu is not None:  # NaN counts as no fit
                    ensemble.diagnostics["strategy"] = "ensemble (RLU does not fit)"
            return ensemble
        fitted, why = _run_each(tm, session, ("client-fit",))
        if not fitted:
            if ensemble is not None:
                ensemble.diagnostics["not_run"] = {**ensemble.diagnostics["not_run"], **why}
            return ensemble
        name, result, _, seconds = fitted[0]
        extra["candidates"] = [*candidates, {"method": name, "counts": result.counts_int.tolist(),
                                             "seconds": round(seconds, 3), "fit": result.diagnostics["fit"]}]
        return self._routed(fitted[0], "hybrid, client-fit on a delta", spread, negative, extra)

    def _by_rlu_input_independent(self, tm: ThreatModel, session: Session,
                                  spread: float | None) -> LabelResult | None:
        """A FedAvg delta of a model that normalises with batch statistics and gives every input (nearly) the same
        softmax (a ResNet at random init), not routed by its class count: RLU, whose model of the output layer is
        then exact, as on models without such BatchNorm (``_by_client_fit``). The BN-mixture reading is not tried
        before it there: at random init every layer's statistics depend on each batch's own normalisation, and
        on the random-init ResNet-10's random and Dirichlet clients bn-count read 63.4% and RLU 95.6 (docs/results/labels.md,
        "ResNet-10 and ResNet-18 FedAvg deltas"). None where RLU does not apply (the ensemble follows)."""
        runs, skipped = _run_each(tm, session, ("rlu",))
        if not runs:
            return None
        return self._routed(runs[0], "hybrid, RLU on a delta (input-independent outputs)", spread,
                            _negative_entries(tm), {"not_run": skipped})

    def _by_ensemble(self, tm: ThreatModel, session: Session, spread: float | None) -> LabelResult | None:
        """The mean of the applicable ENSEMBLE methods' integer count vectors, projected to integers summing to their
        total (``ensemble_counts``). Their errors differ in kind (bias-count, ZLG and LLG+ assume one softmax for the batch, iLRG one
        embedding per class, LLG the impact of each label, RLU a simulation of the local steps), so the mean trims
        each one's failures; bias-count, ZLG and LLG+ err alike and so weigh about three votes. Measured on LeNet
        FedAvg deltas (docs/results/labels.md) it is within a few points of the best method where one method leads
        and ahead of every single method where none does. On a delta of a model whose BatchNorm normalises with
        batch statistics RLU runs with ``--trajectory interpolate``: its simulated progress gains nothing there and
        costs several times as much (docs/results/labels.md, "RLU's path: simulated progress")."""
        options = {"rlu": {"trajectory": "interpolate"}} if tm.meta.local_steps > 1 and _batch_statistics(tm) else {}
        runs, skipped = _run_each(tm, session, ENSEMBLE, options)
        result = self._ensemble_of(runs, skipped, spread)
        if result is not None and options:
            result.diagnostics["member_options"] = options
        return result

    def _ensemble_of(self, runs, skipped: dict, spread: float | None) -> LabelResult | None:
        """The ensemble's result from the members' runs (``_run_each``); None for fewer than two."""
        if len(runs) < 2:
            return None
        mean, counts = ensemble_counts([r.counts_int for _, r, _, _ in runs])
        return LabelResult(mean.float(), counts, {
            "chosen": "ensemble", "strategy": "ensemble", **self._regime(spread),
            "members": [n for n, _, _, _ in runs],
            "candidates": [{"method": n, "counts": r.counts_int.tolist(), "seconds": round(t, 3)} for n, r, _, t in runs],
            "not_run": skipped})

    @staticmethod
    def _regime(spread: float | None) -> dict:
        regime = "input-independent outputs" if spread is not None and spread < SPREAD_THRESHOLD else "trained-like outputs"
        return {"softmax_spread": spread, "regime": regime}

    def _by_evidence(self, tm: ThreatModel, session: Session, spread: float | None) -> LabelResult | None:
        aux = session.aux if session.aux is not None and session.aux.labels is not None \
            else Aux.dummies(tm.spec, DUMMIES, session.seed)
        try:
            evidence = Evidence(tm, aux)
        except (NotApplicable, ValueError):
            return None
        done, skipped = _run_each(tm, session, CANDIDATES)
        runs = [(name, result, evidence.score(result.counts_int), seconds) for name, result, _, seconds in done]
        if not runs:
            return None
        best = min(range(len(runs)), key=lambda i: (round(runs[i][2], 9), i))
        name, result, score, _ = runs[best]
        rules_choice = next((n for n, m, s in _candidates(tm, session, spread) if not m.why_not(tm, s)), None)
        result.diagnostics = {
            "chosen": name, "strategy": "evidence", "score": score, "evidence_aux": aux.kind,
            "rules_choice": rules_choice, **self._regime(spread),
            "candidates": [{"method": n, "score": s, "counts": r.counts_int.tolist(), "seconds": round(t, 3)}
                           for n, r, s, t in runs],
            "not_run": skipped, **result.diagnostics}
        return result
