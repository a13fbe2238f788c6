"""Start-up: help is served from the light catalog, so printing it imports neither torch nor torchvision
(fedaudit/catalog.py); the catalog matches the registries it is generated from."""

from __future__ import annotations

import subprocess
import sys

from fedaudit import catalog

# every command path of the app, then --help on each, in one process; prints the heavy modules that got imported
_PROBE = r"""
import sys
from typer.main import get_command
from fedaudit.cli.app import app

root = get_command(app)
paths = [[]]
def walk(cmd, prefix):
    for name, sub in getattr(cmd, "commands", {}).items():
        paths.append(prefix + [name])
        walk(sub, prefix + [name])
walk(root, [])
for path in paths:
    try:
        root.main(args=path + ["--help"], prog_name="fedaudit", standalone_mode=False)
    except SystemExit:
        pass
print(len(paths), " ".join(m for m in ("torch", "torchvision", "scipy", "safetensors") if m in sys.modules))
"""


def test_catalog_is_generated_from_the_registries():
    """Stale catalog.json (a method added, an option changed): run `python -m fedaudit.catalog`."""
    assert catalog.PATH.read_text() == catalog.dumps(catalog.build())
    assert catalog.main(["--check"]) == 0


def test_catalog_lists_every_registered_method_with_its_options():
    from fedaudit.attacks import ATTACKS
    from fedaudit.labels import LABEL_METHODS

    labels = catalog.family("labels")
    assert [n for n, _ in labels] == LABEL_METHODS.names()
    ig = next(info for n, info in catalog.family("attacks") if n == "ig")
    assert ig.defaults == ATTACKS.get("ig").loop_settings()
    assert [o.name for o in ig.options] == [o.name for o in ATTACKS.get("ig").options]
    assert catalog.family("attacks").load("ig") is ATTACKS.get("ig")


def test_help_of_every_command_imports_neither_torch_nor_torchvision():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True).stdout
    count, _, heavy = out.strip().splitlines()[-1].partition(" ")
    assert int(count) > 40  # the root, every command, every label method, attack and defense
    assert heavy == "", f"--help imported {heavy}"


def test_listed_torchvision_models_exist_in_torchvision():
    """They are registered by name without importing torchvision (it pulls in torch._dynamo, ~1 s of start-up)."""
    import torchvision

    from fedaudit.models.torchvision_models import LISTED

    known = torchvision.models.list_models(module=torchvision.models)
    assert [n for n in LISTED if n not in known] == []
