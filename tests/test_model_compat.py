"""Models a reviewer brings (issue 87): smooth twins (fedaudit/models/smooth_twins.py) for layers PyTorch cannot
differentiate twice, swapped in the attack's model only within a stated gap; GoogLeNet's eval graph."""

from __future__ import annotations

import json

import torch
from torch import nn

from fedaudit.models.smooth_twins import MAX_GAP, SmoothHardsigmoid, SmoothHardswish, needs_twin, with_smooth_twins


def test_the_twins_are_within_their_stated_gap_and_twice_differentiable():
    x = torch.linspace(-8, 8, 20001, dtype=torch.float64)
    for hard, smooth, name in ((nn.Hardsigmoid(), SmoothHardsigmoid(), "Hardsigmoid"),
                               (nn.Hardswish(), SmoothHardswish(), "Hardswish")):
        gap = float((hard(x) - smooth(x)).abs().max())
        assert gap <= MAX_GAP[name] + 1e-9 and gap > 0.5 * MAX_GAP[name]  # the bound is tight, not loose
        y = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(smooth(y).sum(), y, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), y)  # the second derivative the hard layers lack
        assert torch.isfinite(gg).all()
    # the probe agrees with PyTorch: Hardsigmoid has no second derivative (issue 87's error), so it gets a twin
    y = torch.zeros(3, requires_grad=True)
    (g,) = torch.autograd.grad(nn.Hardsigmoid()(y).sum(), y, create_graph=True)
    try:
        torch.autograd.grad(g.sum(), y)
        lacks = False
    except RuntimeError as e:
        lacks = "not implemented" in str(e)
    assert needs_twin(nn.Hardsigmoid) == lacks


def test_only_a_copy_is_swapped_and_only_where_needed():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Hardswish(), nn.Sequential(nn.Hardsigmoid()), nn.ReLU6())
    twin, found = with_smooth_twins(model)
    assert isinstance(model[2][0], nn.Hardsigmoid)  # the client's model is untouched
    assert found == {name: 1 for name, layer in (("Hardswish", nn.Hardswish), ("Hardsigmoid", nn.Hardsigmoid))
                     if needs_twin(layer)}
    assert isinstance(twin[2][0], SmoothHardsigmoid if needs_twin(nn.Hardsigmoid) else nn.Hardsigmoid)
    assert isinstance(twin[1], SmoothHardswish if needs_twin(nn.Hardswish) else nn.Hardswish)
    assert isinstance(twin[3], nn.ReLU6)  # ReLU6 stays
    assert [k for k, _ in twin.named_parameters()] == [k for k, _ in model.named_parameters()]
    plain = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    assert with_smooth_twins(plain) == (plain, {})


def test_mobilenet_v3_small_reconstructs_with_the_gap_stated(cli, tmp_path):
    """Issue 87: `reconstruct ig` on torchvision's MobileNetV3-small ended in exit 3, "derivative for
    aten::hardsigmoid_backward is not implemented"."""
    ckpt, upd = tmp_path / "m.safetensors", tmp_path / "u.safetensors"
    cli("init-checkpoint", "torchvision.mobilenet_v3_small", "-o", ckpt, "--input-shape", "3,32,32", "-q")
    cli("capture", ckpt, "sample_updates/lenet_b1/truth.safetensors", "-b", "1", "--bn-mode", "eval", "-o", upd, "-q")
    cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "-n", "2", "--proxies", "0", "-q")
    warnings = json.loads((tmp_path / "out" / "report.json").read_text())["attack"]["warnings"]
    assert any("Hardsigmoid layer(s) for smooth twins" in w for w in warnings)


def test_googlenet_captures_and_attacks_in_its_eval_graph(cli, tmp_path):
    """Issue 87: GoogLeNet's auxiliary heads are not in its eval graph; capture ended in exit 3 ("The differentiated
    Tensor ... appears to not have been used in the graph"). They are not uploaded (the step does not change them),
    the update says which, and the attack runs."""
    from fedaudit.io.update import load_update

    ckpt, upd = tmp_path / "g.safetensors", tmp_path / "u.safetensors"
    cli("init-checkpoint", "torchvision.googlenet", "-o", ckpt, "--input-shape", "3,32,32", "-q")
    cli("capture", ckpt, "sample_updates/lenet_b1/truth.safetensors", "-b", "1", "--bn-mode", "eval", "-o", upd, "-q")
    meta = load_update(upd).meta
    assert meta.source["not_in_graph"] and all(k.startswith("aux") for k in meta.source["not_in_graph"])
    cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "-n", "1", "--proxies", "0", "--labels-file",
        _labels(tmp_path), "-q")


def _labels(tmp_path):
    path = tmp_path / "labels.json"
    path.write_text('{"labels": [3]}')
    return path


def test_a_conv_classifier_is_refused_with_its_layer_named_and_runs_with_labels_given(cli, tmp_path):
    """Issue 87: SqueezeNet ends in a 1x1 convolution; every label method refused it without saying which layer, and
    with the labels given the run ended in exit 3 (dropout under vmap, fixed with the stacked proxies). Now the
    refusal names the layer once and says what to do, and the run with labels completes."""
    ckpt, upd = tmp_path / "s.safetensors", tmp_path / "u.safetensors"
    cli("init-checkpoint", "torchvision.squeezenet1_1", "-o", ckpt, "--input-shape", "3,32,32", "-q")
    cli("capture", ckpt, "sample_updates/lenet_b4/truth.safetensors", "-b", "4", "-o", upd, "-q")
    res = cli("labels", "auto", ckpt, upd, expect=2)
    assert res.stderr.count("\n") == 1 and "it ends in classifier.1, a Conv2d" in res.stderr
    assert res.stderr.count("no linear output layer") == 1 and "--labels-file" in res.stderr
    path = tmp_path / "labels.json"
    path.write_text('{"labels": [3, 8, 8, 0]}')
    cli("reconstruct", "ig", ckpt, upd, "-o", tmp_path / "out", "-n", "2", "--proxies", "1", "--labels-file", path,
        "-q")


def test_dlg_on_a_vision_transformer_runs(cli, tmp_path):
    """Issue 86's held-out grid: DLG (L-BFGS) on vit-tiny ended in exit 3, "view size is not compatible with input
    tensor's size and stride": the images' gradient came back non-contiguous through the patch embedding."""
    ckpt, upd = tmp_path / "v.safetensors", tmp_path / "u.safetensors"
    cli("init-checkpoint", "vit-tiny", "-o", ckpt, "-q")
    cli("capture", ckpt, "sample_updates/lenet_b4/truth.safetensors", "-b", "4", "-o", upd, "-q")
    path = tmp_path / "labels.json"
    path.write_text('{"labels": [3, 8, 8, 0]}')
    cli("reconstruct", "dlg", ckpt, upd, "-o", tmp_path / "out", "-n", "2", "--proxies", "0", "--labels-file", path,
        "-q")
