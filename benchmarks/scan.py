"""`fedaudit scan` on benign checkpoints and on checkpoints built to leak: the confusion table (issue 89).

Malicious checkpoints are built with breaching 0.1.2's own malicious modifications (``pip install breaching==0.1.2``,
the ``bench`` extra; never a runtime dependency): the imprint block (Robbing the Fed's configuration: 64 bins, a
Fourier query of mode 32), the sparse imprint, the one-shot block (its sparse variant does not construct in 0.1.2: ``_get_bins`` takes no
argument there), curious-abandon-honesty's trap weights, an imprint
placed after a linearised ResNet stack (breaching's ``_linearize_up_to_imprint``), the class and feature attacks of
its fishing server and the whole-layer fishing at multipliers 12 to 300, and the malicious transformer's parameter
modifications on a GPT-2 folder. Each is saved as a fedaudit checkpoint declaring the architecture it was built from.

The benign set: torchvision classifiers at random initialisation, fedaudit's registered models at random
initialisation and after one epoch on MNIST digits, the ImageNet-pretrained AlexNet and VGG16 stacks, ViT-tiny, the
GPT-2 sample folder, and every checkpoint in sample_updates/. The thresholds were set on it; a held-out benign set
(ten more torchvision families, ViT-B/16 among them, and a GPT-2-small-sized folder) was read only afterwards.

    PYTHONPATH=. .venv/bin/python -m benchmarks.scan             # writes benchmarks/results/scan.json and the table
    PYTHONPATH=. .venv/bin/python -m benchmarks.scan --table     # the table from the stored rows
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
import types
from pathlib import Path

import torch

from benchmarks.common import RESULTS, trained
from fedaudit.io.checkpoint import spec_metadata
from fedaudit.io.files import write_safetensors
from fedaudit.models import ModelSpec, build_model
from fedaudit.scan.run import scan_path

OUT = RESULTS / "scan.json"
ROOT = Path(__file__).resolve().parents[1]
CIFAR = ((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))
TORCHVISION = [("resnet18", 224), ("resnet50", 64), ("mobilenet_v2", 64), ("mobilenet_v3_small", 64),
               ("efficientnet_b0", 64), ("densenet121", 64), ("vgg11", 64), ("alexnet", 64), ("squeezenet1_1", 64),
               ("shufflenet_v2_x1_0", 64), ("regnet_y_400mf", 64), ("convnext_tiny", 64)]
# held out: thresholds were set on the rows above (docs/results/scan.md); these families were read only afterwards
TORCHVISION_HELDOUT = [("efficientnet_b1", 64), ("mnasnet0_5", 64), ("regnet_x_400mf", 64), ("resnext50_32x4d", 64),
                       ("googlenet", 64), ("mobilenet_v3_large", 64), ("swin_t", 64), ("wide_resnet50_2", 64),
                       ("vit_b_16", 224), ("efficientnet_v2_s", 64)]
# read only after the rules' last change (a zero head is not fishing; the probe reads GoogLeNet's logits), which the
# first held-out set prompted
TORCHVISION_HELDOUT2 = [("convnext_small", 64), ("regnet_y_800mf", 64), ("resnet101", 64), ("efficientnet_b3", 64),
                        ("vit_b_32", 224), ("shufflenet_v2_x0_5", 64)]
REGISTERED = [("lenet", 1, 32), ("convnet", 3, 32), ("resnet10", 3, 32), ("flower-cnn", 3, 32), ("mlp", 3, 32),
              ("resnet18", 3, 32), ("vit-tiny", 3, 32)]
TRAINED = ["lenet", "convnet", "resnet10", "flower-cnn", "mlp"]


def spec_for(arch: str, channels: int = 3, side: int = 32, classes: int = 10) -> ModelSpec:
    mean, std = ((0.5,), (0.5,)) if channels == 1 else CIFAR
    return ModelSpec(arch, classes, (channels, side, side), mean, std)


def save(path: Path, model: torch.nn.Module, spec: ModelSpec) -> Path:
    """The model's state as a fedaudit checkpoint declaring ``spec`` (whatever modules were inserted)."""
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    return write_safetensors(path, state, spec_metadata(spec))


def benign(d: Path) -> list[tuple[str, Path]]:
    out = []
    for name, side in TORCHVISION:
        torch.manual_seed(0)
        spec = spec_for(f"torchvision.{name}", 3, side)
        out.append((f"torchvision {name} (random init, {side} px)", save(d / f"tv_{name}.safetensors",
                                                                       build_model(spec), spec)))
    for arch, c, side in REGISTERED:
        torch.manual_seed(1)
        spec = spec_for(arch, c, side)
        model = build_model(spec)
        out.append((f"{arch} (random init)", save(d / f"{arch}.safetensors", model, spec)))
        if arch in TRAINED:
            spec3 = spec_for(arch, 3, 32)  # trained() feeds 3-channel digits
            m3 = build_model(spec3)
            out.append((f"{arch} (1 epoch on MNIST digits)", save(d / f"{arch}_trained.safetensors",
                                                                 trained(m3, spec3), spec3)))
    for arch in ("alexnet-imagenet", "vgg16-imagenet"):
        spec = spec_for(arch, 3, 64)
        try:
            out.append((f"{arch} (ImageNet-pretrained features)", save(d / f"{arch}.safetensors", build_model(spec),
                                                                      spec)))
        except Exception as exc:  # the pretrained weights are an optional install
            print(f"skipped {arch}: {exc}")
    out += [(f"sample_updates/{p.parent.name}", p) for p in sorted((ROOT / "sample_updates").glob("*/checkpoint.safetensors"))]
    out.append(("sample_updates/gpt2_tiny_b4 (GPT-2 folder)", ROOT / "sample_updates" / "gpt2_tiny_b4" / "checkpoint"))
    return out


def heldout(d: Path, builders=TORCHVISION_HELDOUT, tag: str = "held out") -> list[tuple[str, Path]]:
    out = []
    for name, side in builders:
        torch.manual_seed(0)
        spec = spec_for(f"torchvision.{name}", 3, side)
        out.append((f"torchvision {name} (random init, {side} px; {tag})",
                    save(d / f"{tag.replace(' ', '_')}_{name}.safetensors", build_model(spec), spec)))
    if builders is TORCHVISION_HELDOUT:
        out.append(("GPT-2 small (124M, random init; held out)", gpt2_small(d)))
    return out


def gpt2_small(d: Path) -> Path:
    """A GPT-2-small-sized folder (12 layers, width 768, 50,257 rows) at random init, with the offline tokenizer."""
    from fedaudit.io.text_checkpoint import save_text_checkpoint
    from fedaudit.models.text_tiny import gpt2, train_tokenizer

    tok = train_tokenizer(2000)
    folder = d / "gpt2_small"
    save_text_checkpoint(folder, gpt2(tok, width=768, layers=12, heads=12, positions=1024, vocab_size=50257), tok)
    return folder


def _resnet(side: int = 32, seed: int = 0) -> tuple[ModelSpec, torch.nn.Module]:
    torch.manual_seed(seed)
    spec = spec_for("torchvision.resnet18", 3, side)
    return spec, build_model(spec)


def malicious(d: Path) -> list[tuple[str, Path, str]]:
    """(name, checkpoint, the construction) built with breaching's own code."""
    from breaching.cases.malicious_modifications import classattack_utils as cls_utils
    from breaching.cases.malicious_modifications import imprint as br
    from breaching.cases.malicious_modifications.parameter_utils import replace_module_by_instance
    from breaching.cases.servers import MaliciousModelServer

    out = []

    def insert(block, at: str, spec, model, name, linearise: bool = False):
        module = dict(model.named_modules())[at]
        replace_module_by_instance(model, module, torch.nn.Sequential(block, module))
        if linearise:  # breaching's own linearisation of the layers before the block (a ResNet rule)
            holder = types.SimpleNamespace(model=model)
            MaliciousModelServer._linearize_up_to_imprint(holder, model, type(block))
        out.append((name, save(d / f"{name.split()[0]}.safetensors", model, spec), name))

    shape = [3, 32, 32]
    torch.manual_seed(0)
    for cls, kwargs, label in (
            (br.ImprintBlock, dict(num_bins=64, mode=32, linfunc="fourier", gain=1.0), "imprint"),
            (br.SparseImprintBlock, dict(num_bins=64, mode=32, linfunc="fourier", gain=1.0), "sparse-imprint"),
            (br.OneShotBlock, dict(num_bins=64, mode=32, linfunc="fourier", gain=1.0), "one-shot"),
            (br.CuriousAbandonHonesty, dict(num_bins=64, mu=0, sigma=0.5, scale_factor=0.95, connection="addition"),
             "curious-abandon-honesty")):
        spec, model = _resnet()
        insert(cls(shape, **kwargs), "conv1", spec, model, f"{label} (breaching, before conv1 of a ResNet-18)")
    # an imprint after the first stage, the stack before it linearised (breaching's "identity" handling)
    spec, model = _resnet()
    with torch.no_grad():
        feat = model.maxpool(model.relu(model.bn1(model.conv1(torch.zeros(1, *shape)))))
    insert(br.ImprintBlock(list(feat.shape[1:]), num_bins=64, mode=32, linfunc="fourier", gain=1.0), "layer1", spec,
           model, "linearised-imprint (breaching, after a linearised stem)", linearise=True)
    # fishing: breaching's class attack, feature attack and the whole-layer multiplier
    for state, extra, label in (("cls_attack", {"cls_to_obtain": 0}, "fishing-class (breaching cls_attack)"),
                                ("feature_attack", {"cls_to_obtain": 0, "feat_to_obtain": 5, "multiplier": 300,
                                                    "feat_value": 0.5}, "fishing-feature-300 (breaching feature_attack)"),
                                ("feature_attack", {"cls_to_obtain": 0, "feat_to_obtain": 5, "multiplier": 12,
                                                    "feat_value": 0.5}, "fishing-feature-12 (breaching feature_attack)"),
                                *[("fishing_attack", {"cls_to_obtain": 0, "multiplier": m}, f"fishing-x{m} (breaching "
                                   "fishing_attack)") for m in (12, 16, 300)]):
        spec, model = _resnet()
        original = copy.deepcopy(model)
        if state == "feature_attack":
            cls_utils.reconfigure_class_parameter_attack(model, original, "cls_attack", extra)
        cls_utils.reconfigure_class_parameter_attack(model, original, state, extra)
        out.append((label, save(d / f"{label.split()[0]}.safetensors", model, spec), label))
    out.append(transformer(d))
    return out


def transformer(d: Path) -> tuple[str, Path, str]:
    """breaching's malicious-transformer parameter modifications on a copy of the GPT-2 sample folder."""
    import shutil

    from breaching.cases.malicious_modifications import analytic_transformer_utils as tu
    from breaching.cases.models.transformer_dictionary import lookup_module_names

    from fedaudit.io.text_checkpoint import load_text_checkpoint, save_text_checkpoint

    src = ROOT / "sample_updates" / "gpt2_tiny_b4" / "checkpoint"
    ck = load_text_checkpoint(src)
    model = ck.model
    lookup = lookup_module_names("gpt2", types.SimpleNamespace(model=model))
    hidden, embedding, transposed = lookup["dimensions"]
    v_length = 6
    torch.manual_seed(0)
    w = torch.randn(embedding - v_length - 1)
    measurement = torch.zeros(embedding)
    measurement[v_length:-1] = (w - w.mean()) / w.std() / (embedding - v_length - 1) ** 0.5
    with torch.no_grad():
        tu.partially_disable_embedding(lookup["embedding"], v_length)
        tu.set_MHA(lookup["first_attention"], lookup["norm_layer0"], lookup["pos_encoder"], embedding, transposed, [16],
                   sequence_token_weight=1, imprint_sentence_position=0, softmax_skew=1e8, v_length=v_length)
        tu.set_flow_backward_layer(lookup["second_linear_layers"], ff_transposed=transposed, eps=1e-4)
        tu.disable_mha_layers(lookup["unused_mha_outs"])
        tu.make_imprint_layer(lookup["first_linear_layers"], measurement, 0.0, 1.0, hidden, embedding,
                              ff_transposed=transposed)
    folder = d / "malicious_gpt2"
    shutil.rmtree(folder, ignore_errors=True)
    save_text_checkpoint(folder, model, ck.tokenizer)
    return "malicious-transformer (breaching, GPT-2 folder)", folder, "malicious-transformer"


def row(name: str, path: Path, truth: str) -> dict:
    t0 = time.perf_counter()
    try:
        r = scan_path(path)
    except Exception as exc:  # a row that cannot be scanned is a result, not a crash of the benchmark
        return {"name": name, "truth": truth, "error": f"{type(exc).__name__}: {exc}"}
    return {"name": name, "truth": truth, "severity": r["severity"], "seconds": round(time.perf_counter() - t0, 2),
            "findings": [(f["check"], f["tensor"], f["severity"], f["value"]) for f in r["findings"]],
            "measured": r["measured"]}


def table(rows: list[dict]) -> str:
    lines = ["| checkpoint | truth | scan severity | findings (check: severity) | D-SNR | output gain ratio | s |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['truth']} | error: {r['error']} | | | | |")
            continue
        found = ", ".join(sorted({f"{c}: {s}" for c, _, s, _ in r["findings"]})) or "-"
        d = (r["measured"].get("d_snr") or {}).get("value")
        g = r["measured"].get("output_gain_ratio")
        lines.append(f"| {r['name']} | {r['truth']} | {r['severity']} | {found} | "
                     f"{'' if d is None else f'{d:.2f}'} | {'' if g is None else f'{g:.2f}'} | {r['seconds']} |")
    ok = [r for r in rows if "error" not in r]
    ben = [r for r in ok if r["truth"] == "benign"]
    held = [r for r in ok if r["truth"] == "benign (held out)"]
    held2 = [r for r in ok if r["truth"] == "benign (held out 2)"]
    mal = [r for r in ok if not r["truth"].startswith("benign")]
    lines += [""] + [f"{what}: {len(rs)} checkpoints, flagged high {sum(r['severity'] == 'high' for r in rs)}, medium "
                     f"{sum(r['severity'] == 'medium' for r in rs)}" for what, rs in
                     (("benign", ben), ("benign, held out", held), ("benign, held out 2", held2), ("malicious", mal))]
    lines.append(f"errors: {len(rows) - len(ok)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return 0
    torch.set_num_threads(2)  # the scan-time target is for a 2-core CPU
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for name, path, what in malicious(d):
            rows.append(row(name, path, what))
            print(rows[-1], flush=True)
        for name, path in benign(d):
            rows.append(row(name, path, "benign"))
            print(rows[-1], flush=True)
        for name, path in heldout(d):
            rows.append(row(name, path, "benign (held out)"))
            print(rows[-1], flush=True)
        for name, path in heldout(d, TORCHVISION_HELDOUT2, "held out 2"):
            rows.append(row(name, path, "benign (held out 2)"))
            print(rows[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
