"""``shared_head_passes``: within ``labels auto`` a repeated head pass (same model state, equal images) is run once,
and never where the model changed, a hook watches or a train-mode pass draws dropout masks."""

from __future__ import annotations

import torch
from torch import nn

from fedaudit.models import build_model
from fedaudit.models import head as head_mod
from fedaudit.models.head import output_layer_io, shared_head_passes

from .helpers import CIFAR_SPEC


def _counting(monkeypatch) -> list:
    calls: list = []
    real = head_mod._output_layer_io

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(head_mod, "_output_layer_io", counted)
    return calls


def _lenet_and_images(n: int) -> tuple[nn.Module, torch.Tensor]:
    """A seeded CIFAR LeNet in eval mode and ``n`` random images for it."""
    torch.manual_seed(0)
    return build_model(CIFAR_SPEC).eval(), torch.rand(n, 3, 32, 32)


def test_a_repeated_pass_runs_once_and_gives_the_same_result(monkeypatch):
    model, x = _lenet_and_images(6)
    alone = output_layer_io(model, CIFAR_SPEC, "fc", x, False)
    calls = _counting(monkeypatch)
    with shared_head_passes():
        first = output_layer_io(model, CIFAR_SPEC, "fc", x, False)
        again = output_layer_io(model, CIFAR_SPEC, "fc", x.clone(), False)  # equal images, another tensor
        assert len(calls) == 1 and all(torch.equal(a, b) for a, b in zip((*first, *again), (*alone, *alone)))
        again[0].zero_()  # the caller's copy: the kept result is untouched
        assert torch.equal(output_layer_io(model, CIFAR_SPEC, "fc", x, False)[0], alone[0]) and len(calls) == 1
        output_layer_io(model, CIFAR_SPEC, "fc", x[:3], False)  # other images
        output_layer_io(model, CIFAR_SPEC, "fc", x, True)  # another BN mode
        assert len(calls) == 3
        with torch.no_grad():
            next(model.parameters()).add_(0.01)  # the model changed in place
        moved = output_layer_io(model, CIFAR_SPEC, "fc", x, False)
        assert len(calls) == 4 and not torch.equal(moved[1], alone[1])
        x.mul_(0.5)  # the kept images changed in place
        output_layer_io(model, CIFAR_SPEC, "fc", x, False)
        assert len(calls) == 5
    output_layer_io(model, CIFAR_SPEC, "fc", x, False)
    output_layer_io(model, CIFAR_SPEC, "fc", x, False)
    assert len(calls) == 7  # outside the block every pass runs


def test_watched_or_random_passes_are_never_shared(monkeypatch):
    model, x = _lenet_and_images(4)
    calls = _counting(monkeypatch)
    seen: list = []
    with shared_head_passes():
        output_layer_io(model, CIFAR_SPEC, "fc", x, False)
        hook = next(iter(model.children())).register_forward_hook(lambda m, i, o: seen.append(o.shape))
        try:
            output_layer_io(model, CIFAR_SPEC, "fc", x, False)
        finally:
            hook.remove()
        assert len(calls) == 2 and len(seen) == 1  # the hook saw its pass
        dropped = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(12, 3))
        spec = type(CIFAR_SPEC)("mlp", 3, (3, 2, 2), (0.0,) * 3, (1.0,) * 3)
        y = torch.rand(5, 3, 2, 2)
        output_layer_io(dropped, spec, "2", y, True)
        output_layer_io(dropped, spec, "2", y, True)
        assert len(calls) == 4  # train mode draws new dropout masks each pass
        output_layer_io(dropped, spec, "2", y, False)
        output_layer_io(dropped, spec, "2", y, False)
        assert len(calls) == 5  # in eval mode dropout draws nothing


def test_each_thread_has_its_own_passes(monkeypatch):
    """A block opened in one thread shares nothing with another thread (audit workers may run in threads)."""
    import threading

    model, x = _lenet_and_images(4)
    calls = _counting(monkeypatch)
    with shared_head_passes():
        output_layer_io(model, CIFAR_SPEC, "fc", x, False)
        worker = threading.Thread(target=lambda: output_layer_io(model, CIFAR_SPEC, "fc", x, False))
        worker.start()
        worker.join()
        assert len(calls) == 2  # the other thread is outside any block: its pass ran
        output_layer_io(model, CIFAR_SPEC, "fc", x, False)
        assert len(calls) == 2
