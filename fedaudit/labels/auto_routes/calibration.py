"""Every threshold ``auto``'s routes decide by, in one place, with where it was chosen and what it measured on data it
was not chosen on. A route imports its numbers from here; docs/results/labels.md has the sections named.

``held_out`` says "not measured" where no out-of-sample figure exists: those are the first candidates to re-check
(issue 66's pruning asks every route to beat the plain ensemble out of sample by more than its standard error).
Pruned so (2026-11-29, 348 held-out clients of benchmarks/labels_routes.py): MANY_CLASSES and INVISIBLE_SHARE (the
class-count route's split of trained-like batches between bias-count and LLG: now bias-count beyond FEW_CLASSES, the
plain ensemble up to it): +0.3 +- 0.3 points on the route's 106 clients, the same rows within 2 points of the best
method. AGREE_TV stays: without it its clients lost 6-25 points each, held out and in-sample (docs/results/labels.md,
"Which routes earn their place"). Pruned so (2026-12-01): DOUBT_SHARE and DOUBT_MAX_CHANGE (a one-class reading
doubted by bn-count's rejected reading of the BN mixture): on 32 held-out BN clients without weight decay the
shown-classes step that follows overrides them (no reading changed); on 64 with weight decay, where that step cannot
be read, -0.2 +- 0.8 points (3 fired: +18, +9 and -43). NEAR_AUX_TV stays: without it -1.5 +- 0.7 points on 18
held-out clients ("Near the aux mix").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Calibrated:
    name: str
    value: float
    decides: str  # what the route does on either side of it
    chosen_on: str  # the benchmark and the rows it was chosen on
    held_out: str  # what it measured on rows it was not chosen on
    source: str  # the section of docs/results/labels.md
    date: str


CALIBRATION: dict[str, Calibrated] = {}


def _c(name: str, value, decides: str, chosen_on: str, held_out: str, source: str, date: str):
    CALIBRATION[name] = Calibrated(name, value, decides, chosen_on, held_out, source, date)
    return value


SPREAD_THRESHOLD = _c(
    "SPREAD_THRESHOLD", 0.3,
    "softmax spread (mean total-variation distance of each probe image's softmax from their mean) below which a "
    "model's outputs count as input-independent (the rules' regime), at or above which as trained-like",
    "benchmarks.labels main table: random init <= 0.21, trained >= 0.35 on dummies, >= 0.70 on real images",
    "the UCI digits table (another dataset): the same split of random-init and trained models",
    "Method notes (FedSGD table)", "2026-11-23")
INPUT_INDEPENDENT = _c(
    "INPUT_INDEPENDENT", 0.08,
    "a FedAvg delta of a model below this spread goes to RLU (its output-layer model is exact there), before "
    "client-fit and every BN-statistics reading",
    "spreads of the PyTorch-init LeNet (0.0004), CIFAR ResNet-10/18 at random init (0.039-0.055, twelve inits), "
    "ConvNets (0.114-0.131), the DLG LeNet (0.15); 0.05 chosen on the LeNets split the ResNet-18's inits",
    "ResNet-18 clients: +3.4 +- 0.9 points per client on 12 held out",
    "ResNet-10 and ResNet-18 FedAvg deltas", "2026-11-28")
ONE_CLASS_SHARE = _c(
    "ONE_CLASS_SHARE", 0.8,
    "one negative output-bias entry and at least this share of the batch on that class (bn-count, or LLG with HFGI "
    "agreeing) reads as a single-class batch",
    "benchmarks.labels --bn-buffers, trained ConvNet and ResNet-10 (91/94 -> 93/94 with the check)",
    "benchmarks.labels_bn_two_class: fires only on 90/10 batches (3 of 4 at B = 8), costing the minority",
    "BN statistics; One class without BN buffers", "2026-11-24")
FEW_CLASSES = _c(
    "FEW_CLASSES", 2,
    "at most this many negative output-bias entries reads as a non-IID batch of few classes (the plain ensemble; "
    "LLG until 2026-11-29); more, on trained-like outputs: bias-count",
    "benchmarks.labels_fedavg --models lenet (16 two-class rows with K > 1: 62 -> 74%)",
    "FedSGD table's trained rows: +3 points on every row (single-class and repeated batches); tests/test_rlu.py",
    "Many classes", "2026-11-23")
SPLIT_MAX_FIT = _c(
    "SPLIT_MAX_FIT", 1e-2,
    "sample-split's answer is kept where its fit is at most this",
    "main table's trained batches of 8: final fits 1e-9 to 1e-4, failed searches 1e-2 to 1e-1",
    "48 held-out batches of 8 (UCI digits, batch seed 2, four trained families; 2026-11-30): fits 3e-8 to 4e-3, every "
    "one kept: 96.4% against 86.2 by the route below (+10.2 +- 2.0 points); thresholds of 1e-3 / 1e-4 / 1e-5 lose "
    "0.5 / 1.6 / 3.1 points; no failed search (above 1e-2) occurred to test the upper side",
    "sample-split", "2026-11-26")
HIDDEN_MIN_RESOLVED = _c(
    "HIDDEN_MIN_RESOLVED", 0.5,
    "hidden-split's answer is kept where it verified at least this share of the batch",
    "trained MLP, batches of 16-32 (verified 34-100%) and 64 (23-50%)",
    "36 held-out batches of 8-32 (UCI digits, batch seed 2, trained MLP; 2026-11-30): 0.5 reads best, 89.7%; keeping "
    "every answer (0) -7.5 +- 2.8 points, 0.25 -0.5 +- 0.6, 0.75 -2.3 +- 1.5, 1.0 -3.6 +- 1.9",
    "hidden-split", "2026-11-26")
HIDDEN_MAX_BATCH = _c(
    "HIDDEN_MAX_BATCH", 32,
    "hidden-split is tried only on batches of at most this many samples",
    "trained MLP at B = 64 (never kept); a probe on Flower's CNN (32 of 64 verified, 23 wrong)",
    "lifted on 106 held-out batches of 16-64 (UCI digits, batch seed 2; Flower's CNN, MLPs [128, 64] and [256, 128]; "
    "2026-11-30): Flower's CNN verified 15 wrong labels of 159 at B = 48, 12 of 66 at 64, none of 88 at 16, and lost "
    "1.9 points at 48 (one batch kept: 64.6% against 87.5); the MLPs never verify half a batch above 32",
    "hidden-split", "2026-11-26")
MIN_AUX_PER_CLASS = _c(
    "MIN_AUX_PER_CLASS", 20,
    "bn-count is routed to (and runs without a warning) only when every aux class holds this many labelled images",
    "benchmarks.labels --bn-buffers --aux-per-class 5/10/20, trained ConvNet and ResNet-10",
    "20 per class: 90/90 against the gradient route's 79/88",
    "Smaller aux sets and another dataset", "2026-11-25")
MIXTURE_MAX_RESIDUAL = _c(
    "MIXTURE_MAX_RESIDUAL", 0.05,
    "bn-count's reading of a FedAvg delta's BN mixture is accepted below this relative residual ...",
    "client-fit-on-the-BN-ConvNet clients (lent GPU, 18 clients; a truth-free switch that gained 9-12 points)",
    "36 held-out trained ConvNet clients: 87.0% against 77.7 (+11.5 +- 2.6 per client where it fires)",
    "bn-count on FedAvg deltas", "2026-11-26")
MIXTURE_MAX_CHANGE = _c(
    "MIXTURE_MAX_CHANGE", 0.01,
    "... and where the model moved less than this share of its norm",
    "the same 18 clients", "the same 36 held-out clients", "bn-count on FedAvg deltas", "2026-11-26")
NEAR_AUX_TV = _c(
    "NEAR_AUX_TV", 0.25,
    "bn-count's accepted reading within this total-variation distance of the aux mix is averaged with bias-count",
    "labels_fedavg's trained-ConvNet random and Dirichlet clients, trials 0-2 (0.25 and 0.3 alike)",
    "held-out client set 4: 87.0 -> 87.8; K = 2 within the noise; 40 trained ConvNet and ResNet-10 random clients of "
    "UCI digits (K 4/8, B 8/32; 2026-12-01): fired on 15 (ConvNet), without it -1.5 +- 0.7 points on the 18 bn-mixture "
    "answered (16 readings changed)",
    "Near the aux mix", "2026-11-27")
AGREE_TV = _c(
    "AGREE_TV", 0.5,
    "a rejected BN reading and LLG's within this total-variation distance: the mean of bias-count, the reading and LLG",
    "trained BN ConvNet clients, K 4/8, momentum 0.9, trials 0-5",
    "trials 6-11: Dirichlet clients +6.9 +- 2.5 points per client, random -1.3 +- 1.0",
    "Two readings agree", "2026-11-27")
FEW_SHOWN = _c(
    "FEW_SHOWN", 3,
    "at most this many classes shown present for certain reads as a batch of those classes only",
    "benchmarks.labels trained rows (4 and 5 gave the same or worse)",
    "held-out batches (--batch-seed 1): within one standard error of the table; deltas: ConvNet two-class "
    "67.9 -> 88.4, LeNets 83.7 -> 93.2 / 65.0 -> 87.4 held out",
    "Shown classes", "2026-11-26")
SHOWN_MEAN_STEPS = _c(
    "SHOWN_MEAN_STEPS", 2,
    "up to this many local steps a BN model's shown classes are split by the mean of bn-count's and bias-count's "
    "readings (option shown-mean-steps)",
    "trials 0-3 of the ResNet-10 and ConvNet clients (at K >= 4 the mean lost 1-5 points on the ConvNet)",
    "56 held-out clients (trials 4-5): +5.3 +- 2.2 points per client",
    "A two-step client's shown classes", "2026-11-28")
CLIENT_FIT_MAX_PARAMETERS = _c(
    "CLIENT_FIT_MAX_PARAMETERS", 1_000_000,
    "client-fit (K unrolled steps of the whole model) runs only on models of at most this many parameters",
    "not measured: the LeNets it was measured on have 6-62 thousand",
    "lifted on 128 held-out deltas of models above it (UCI digits; an MLP [1024, 1024], AlexNet, VGG16; 2026-11-30): "
    "client-fit answers 4 of them (the rest take RLU's exact route or the class-count route), -2.1 +- 7.6 points at "
    "44 s a client against 2 s; a VGG16 client was stopped unfinished after about 7 minutes (one thread, load 3)",
    "Deltas of models above client-fit's size", "2026-11-25")
RLU_MAX_RESIDUAL = _c(
    "RLU_MAX_RESIDUAL", 0.1,
    "above client-fit's size, RLU is kept where its least squares leaves less than this share of the update's norm",
    "the LeNets' Dirichlet grid (192 rows; thresholds 0.02-0.2 give 84.4-84.6)",
    "32 held-out rows (K 6/16, lr 0.02/0.1): 80.6-80.7 across the same thresholds; 128 held-out deltas of models "
    "above client-fit's size (2026-11-30), 20 reaching it: the ensemble in RLU's place -2.0 +- 0.6 points (VGG16's "
    "fresh head, residuals 0-0.09), always RLU -1.6 +- 0.8 (residuals 0.15-0.77); with the size cap at 0, 23 DLG LeNet "
    "and Flower CNN clients: ensemble -5.1 +- 1.5, always RLU -1.3 +- 1.4",
    "Deltas of models above client-fit's size", "2026-11-25")
MARGIN = _c(
    "MARGIN", 0.5,
    "at random init ZLG or iLRG replace bias-count only where their raw counts lie within this fraction of "
    "bias-count's distance from their integers",
    "a 4-digit weights upload where a close call went wrong",
    "126 held-out random-init clients (labels_routes digits, mnist, noniid; 2026-11-30): without the margin "
    "-0.22 +- 0.17 points per client, 6 lower and 2 higher", "Which routes earn their place", "2026-11-23")
