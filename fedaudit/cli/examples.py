"""One example per command, shown at the end of its ``--help`` (issue 90: no help had one). Each runs as written from
the repository root after the README's set-up commands (S is a sample folder); the method families' subcommands get
their group's example with the method's name in it, so adding a method adds its example."""

from __future__ import annotations

import typer

S = "S=sample_updates/lenet_b4"
ARGS = "$S/checkpoint.safetensors $S/update.safetensors"

COMMANDS = {
    "models": "fedaudit models -q > models.json",
    "inspect": f"{S}; fedaudit inspect {ARGS} > inspect.json",
    "audit": f"{S}; fedaudit audit {ARGS} --truth $S/truth.safetensors -o matrix/ --attacks ig,dlg --defenses none,prune:0.5 -n 200",
    "audit-round": "fedaudit audit-round demo_round -o demo_round_report/ -n 200 -j 2",
    "capture": f"{S}; fedaudit capture $S/checkpoint.safetensors $S/truth.safetensors -b 4 -o my_update.safetensors",
    "init-checkpoint": "fedaudit init-checkpoint lenet -o my_ckpt.safetensors --mean 0.4914,0.4822,0.4465 --std 0.247,0.2435,0.2616",
    "score": "fedaudit score quick/reconstruction.safetensors --truth sample_updates/lenet_b4/truth.safetensors -o scored/",
    "lpips-export": "fedaudit lpips-export --net vgg -o lpips_vgg.safetensors",
    "train-inverter": ("fedaudit aux export cifar10 -o aux.safetensors; fedaudit train-inverter "
                       "sample_updates/lenet_b4/checkpoint.safetensors aux.safetensors -o inverter.safetensors"),
    "train-refiner-critic": "fedaudit aux export cifar10 -o aux.safetensors; fedaudit train-refiner-critic aux.safetensors -o critic.safetensors",
    "import flower-npz": ("F=sample_updates/flower_lenet_k2; fedaudit import flower-npz $F/client_arrays.npz "
                          "-c $F/checkpoint.safetensors -o flower_update.safetensors --lr 0.05 -k 2 -b 4"),
    "import update": "fedaudit import update grads.safetensors -c checkpoint.safetensors -o update.safetensors --kind gradient -b 8",
    "import checkpoint": "fedaudit import checkpoint state.safetensors --arch torchvision.resnet18 -o checkpoint.safetensors",
    "aux export": "fedaudit aux export cifar10 -o aux.safetensors",
    "scan": f"{S}; fedaudit scan $S/checkpoint.safetensors --fail-on high --html scan.html > scan.json",
}
GROUPS = {
    "labels": f"{S}; fedaudit labels {{name}} {ARGS} -o labels.json",
    "reconstruct": f"{S}; fedaudit reconstruct {{name}} {ARGS} -o out/ --fail-on high",
    "defend": f"{S}; fedaudit defend {{name}} {ARGS} -o defended.safetensors",
}
TEXT = {"dager", "tag", "lamp"}  # reconstruct's text attacks read a language-model folder
TEXT_EXAMPLE = ("T=sample_updates/gpt2_tiny_b4; fedaudit reconstruct {name} $T/checkpoint $T/update.safetensors -o "
                "text_out/")


def _epilog(example: str) -> str:
    return f"Example: {example}"


def add_examples(app: typer.Typer) -> None:
    """Set each command's ``--help`` epilog to its example (a command without one keeps none: a test fails then)."""
    for info in app.registered_commands:
        if info.name in COMMANDS and not info.epilog:
            info.epilog = _epilog(COMMANDS[info.name])
    for group in app.registered_groups:
        for info in group.typer_instance.registered_commands if group.typer_instance else []:
            key = f"{group.name} {info.name}"
            if key in COMMANDS:
                info.epilog = _epilog(COMMANDS[key])
            elif group.name == "reconstruct" and info.name in TEXT:
                info.epilog = _epilog(TEXT_EXAMPLE.format(name=info.name))
            elif group.name in GROUPS:
                info.epilog = _epilog(GROUPS[group.name].format(name=info.name))
