"""The output layer's statistics label methods model the captured gradient with: G = mean_n (p_n - y_n) h_n^T.

Features h and softmax p of auxiliary images or dummies come from fedaudit/models/head.py, run in the BatchNorm
mode the update records (eval when unknown).
"""

from __future__ import annotations

import torch

from fedaudit.models.head import CHUNK, output_layer_io
from fedaudit.session import Aux
from fedaudit.threat_model import ThreatModel


def head_stats(tm: ThreatModel, images: torch.Tensor, normalized: bool = False, chunk: int = CHUNK):
    """Features into the output layer [N, M] and softmax outputs [N, C] of ``images``."""
    h, z = output_layer_io(tm.model, tm.spec, tm.output_layer, images, tm.train_bn, normalized, chunk)
    return h, torch.softmax(z, dim=1)


def aux_stats(tm: ThreatModel, aux: Aux):
    """Head statistics of aux images or dummies."""
    return head_stats(tm, aux.images, normalized=aux.normalized)


def output_weight_grad_rowsums(tm: ThreatModel) -> torch.Tensor:
    """g_i = sum_m G[i, m] in float64."""
    return tm.output_grad("weight").double().flatten(1).sum(1)
