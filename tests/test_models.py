"""Model registry: every registered architecture builds and runs; names resolve or fail clearly."""

from __future__ import annotations

import sys

import pytest
import torch

from fedaudit.errors import InputError
from fedaudit.models import MODELS, ModelSpec, build_model, final_linear

ISSUE_REQUIRED = {"lenet", "convnet", "mlp", "resnet10", "resnet18", "torchvision.resnet18", "torchvision.resnet34",
                  "torchvision.resnet50", "torchvision.vgg11", "torchvision.mobilenet_v2", "torchvision.densenet121"}


def test_registry_has_the_required_architectures():
    assert ISSUE_REQUIRED <= set(MODELS.names())


@pytest.mark.parametrize("name", MODELS.names())
def test_every_model_builds_and_runs(name):
    shape = (3, 64, 64) if name.startswith("torchvision.") else (3, 32, 32)
    kwargs = {"hidden": [32, 16]} if name == "mlp" else {}
    torch.manual_seed(0)
    model = build_model(ModelSpec(name, 7, shape, (0.5,), (0.5,), kwargs)).eval()
    with torch.no_grad():
        out = model(torch.rand(2, *shape))
    assert out.shape == (2, 7)
    head = dict(model.named_modules())[final_linear(model)]
    assert head.out_features == 7


def test_lenet_is_the_dlg_lenet():
    model = build_model(ModelSpec("lenet", 10, (3, 32, 32), (0.5,), (0.5,)))
    assert model.fc.in_features == 768  # 12 x 8 x 8 after two stride-2 convs
    assert all(p.abs().max() <= 0.5 for p in model.parameters())  # U(-0.5, 0.5) init
    assert isinstance(model.body[1], torch.nn.Sigmoid)


def test_flower_cnn_has_the_tutorials_parameters():
    """The PyTorch tutorial's Net (Flower's quickstart): the same parameter names, order and shapes, so a Flower
    client's positional arrays map onto it; at 32 px its first linear layer takes 16 x 5 x 5 features."""
    model = build_model(ModelSpec("flower-cnn", 10, (3, 32, 32), (0.5,), (0.5,)))
    shapes = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    assert shapes == [("conv1.weight", (6, 3, 5, 5)), ("conv1.bias", (6,)), ("conv2.weight", (16, 6, 5, 5)),
                      ("conv2.bias", (16,)), ("fc1.weight", (120, 400)), ("fc1.bias", (120,)),
                      ("fc2.weight", (84, 120)), ("fc2.bias", (84,)), ("fc3.weight", (10, 84)), ("fc3.bias", (10,))]
    with pytest.raises(InputError, match="at least 16 x 16"):
        build_model(ModelSpec("flower-cnn", 10, (3, 12, 12), (0.5,), (0.5,)))


def test_cifar_resnet_has_3x3_stem_and_width():
    model = build_model(ModelSpec("resnet10", 10, (3, 32, 32), (0.5,), (0.5,), {"width": 8}))
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1) and model.conv1.out_channels == 8


def test_any_torchvision_classifier_resolves():
    model = build_model(ModelSpec("torchvision.resnet101", 5, (3, 64, 64), (0.5,), (0.5,)))
    assert final_linear(model) == "fc"


def test_unknown_arch_suggests_a_name():
    with pytest.raises(InputError, match="did you mean 'lenet'"):
        build_model(ModelSpec("lennet", 10, (3, 32, 32), (0.5,), (0.5,)))


def test_custom_factory_needs_opt_in():
    spec = ModelSpec("tests.custom_arch:tiny", 4, (1, 8, 8), (0.5,), (0.5,))
    with pytest.raises(InputError, match="--allow-custom-arch"):
        build_model(spec)
    model = build_model(spec, allow_custom=True)
    assert model(torch.rand(3, 1, 8, 8)).shape == (3, 4)


def test_a_custom_factory_is_found_by_file_path_or_in_the_current_folder(tmp_path, monkeypatch):
    """Issue 90: '--arch mymodule:make' said "No module named 'mymodule'" from the folder that holds it (the fedaudit
    script's path does not include the current folder). Now a file path works, and so does a module beside you."""
    (tmp_path / "mymodel.py").write_text("from torch import nn\n\n\ndef make(num_classes, input_shape):\n"
                                         "    c, h, w = input_shape\n"
                                         "    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, num_classes))\n")
    by_path = build_model(ModelSpec(f"{tmp_path / 'mymodel.py'}:make", 3, (1, 4, 4), (0.5,), (0.5,)), allow_custom=True)
    assert by_path(torch.rand(2, 1, 4, 4)).shape == (2, 3)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mymodel", raising=False)
    beside = build_model(ModelSpec("mymodel:make", 3, (1, 4, 4), (0.5,), (0.5,)), allow_custom=True)
    assert beside(torch.rand(2, 1, 4, 4)).shape == (2, 3)
    assert str(tmp_path) not in sys.path  # the current folder is on the path only while the module is imported
    with pytest.raises(InputError, match="not a file"):
        build_model(ModelSpec(f"{tmp_path / 'absent.py'}:make", 3, (1, 4, 4), (0.5,), (0.5,)), allow_custom=True)


def test_bad_model_options_are_input_errors():
    with pytest.raises(InputError, match="cannot build"):
        build_model(ModelSpec("lenet", 10, (3, 32, 32), (0.5,), (0.5,), {"no_such_option": 1}))
    with pytest.raises(InputError, match="channels"):
        ModelSpec("lenet", 10, (3, 32, 32), (0.5, 0.5), (0.5,))


def test_models_command_lists_registry(cli):
    data = cli.json(cli("models", "-q"))
    assert {m["name"] for m in data["models"]} == set(MODELS.names())
