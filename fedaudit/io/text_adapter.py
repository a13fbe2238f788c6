"""A PEFT LoRA adapter folder on its base model as a checkpoint: ``adapter_config.json`` + ``adapter_model.safetensors``
(what ``save_pretrained`` writes, and what FlowerTune's clients train), on a base model folder read by
fedaudit/io/text_checkpoint.py.

The base is ``--base FOLDER`` or the adapter's ``base_model_name_or_path`` where that is a folder here (fedaudit never
downloads one); the adapter is injected by ``peft`` itself (the established implementation: its scaling, dropout and
layer matching are the client's) and its weights loaded strictly. LoRA only: DoRA, extra trainable modules
(``modules_to_save``, trainable tokens) and other PEFT methods are refused with one line. The round's global state is
the adapter: its weights' sha256 is the checkpoint hash an update is checked against.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fedaudit.errors import InputError
from fedaudit.io.files import atomic_write_bytes, atomic_write_text, read_safetensors, safetensors_bytes, sha256_file
from fedaudit.io.hf_folder import ADAPTER, CONFIG, read_config
from fedaudit.io.text_checkpoint import (
    TextCheckpoint,
    load_text_checkpoint,
    refuse_adapter_without_base,
)

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_NAME = "default"  # PEFT's name of the one adapter it injects
UNSUPPORTED = {"use_dora": "DoRA", "modules_to_save": "extra trainable modules (modules_to_save)",
               "trainable_token_indices": "trainable token rows", "layer_replication": "layer replication",
               "megatron_config": "Megatron tensor parallelism (megatron_config)"}
# never handed to peft: with a megatron_config set, peft imports the module megatron_core names, found beside the
# adapter when run from its folder (issue 88: code from input); PEFT writes "megatron.core" there by default
NEVER_PASSED = ("megatron_config", "megatron_core")


def is_adapter(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / ADAPTER).is_file() and not (p / CONFIG).is_file()


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise InputError("LoRA adapters need the text extra: pip install 'fedaudit[text]'") from None
    return peft


def _adapter_config(folder: Path) -> dict[str, Any]:
    config = read_config(folder / ADAPTER)
    if config.get("peft_type") != "LORA":
        raise InputError(f"{folder / ADAPTER}: peft_type {config.get('peft_type')!r} is not supported (LoRA only)")
    for key, what in UNSUPPORTED.items():
        if config.get(key):
            raise InputError(f"{folder / ADAPTER}: {what} is not supported yet (plain LoRA only)")
    return config


def _check_rank(config: dict[str, Any], state: dict[str, Any], source: str) -> None:
    """``r`` an integer the adapter's own ``lora_A`` matrices have as rows; ``lora_alpha`` a finite number."""
    r, alpha = config.get("r", 8), config.get("lora_alpha", 8)
    if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 4096:
        raise InputError(f"{source}: r must be an integer in [1, 4096], got {r!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise InputError(f"{source}: lora_alpha must be a finite number, got {alpha!r}")
    rows = {int(t.shape[0]) for k, t in state.items() if ".lora_A" in k and t.ndim == 2}
    if rows and rows != {r}:
        raise InputError(f"{source}: r = {r}, but the adapter's lora_A matrices have {sorted(rows)} rows")


def base_folder(folder: Path, config: dict[str, Any], base: str | Path | None) -> Path:
    """``base``, or the adapter's named base where it is a folder here (as given, or beside the adapter)."""
    if base is not None:
        return Path(base)
    named = config.get("base_model_name_or_path")
    for candidate in ([Path(named), folder / named, folder.parent / named] if named else []):
        if (candidate / CONFIG).is_file():
            return candidate
    refuse_adapter_without_base(folder)
    raise AssertionError  # unreachable: the call above raises


def load_text_model(path: str | Path, base: str | Path | None = None) -> TextCheckpoint:
    """A model folder (``base`` must then be None), or an adapter folder on its base with the adapter injected."""
    folder = Path(path)
    if not is_adapter(folder):
        if base is not None:
            raise InputError(f"--base is for an adapter folder; {str(folder)!r} is a whole model")
        return load_text_checkpoint(folder)
    config = _adapter_config(folder)
    root_folder = base_folder(folder, config, base)  # an adapter without its base says which base it names, first
    state, _ = read_safetensors(folder / ADAPTER_WEIGHTS, "adapter weights")
    _check_rank(config, state, str(folder / ADAPTER))  # before any module is sized from it (issue 88: r = 1e9)
    root = load_text_checkpoint(root_folder)
    peft = _peft()
    fields = set(peft.LoraConfig.__dataclass_fields__)
    try:
        lora = peft.LoraConfig(**{k: v for k, v in config.items() if k in fields and k not in NEVER_PASSED})
        model = peft.inject_adapter_in_model(lora, root.model, adapter_name=ADAPTER_NAME)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{folder / ADAPTER}: cannot apply the adapter to {root.source!r} ({exc})") from None
    ckpt = TextCheckpoint(model.eval(), root.tokenizer, root.model_type, root.kind, str(folder),
                          sha256_file(folder / ADAPTER_WEIGHTS))
    r = int(lora.r)
    scaling = float(lora.lora_alpha) / (r ** 0.5 if lora.use_rslora else r)
    params = dict(model.named_parameters())
    targets = sorted({n.rsplit(".lora_", 1)[0] for n in params if ".lora_" in n})
    ckpt.adapter = {"path": str(folder), "base": root.source, "base_sha256": root.sha256,
                    "base_named": config.get("base_model_name_or_path"), "r": r, "alpha": float(lora.lora_alpha),
                    "scaling": scaling, "target_modules": targets, "name": ADAPTER_NAME}
    _load_adapter_weights(ckpt, params, state, str(folder / ADAPTER_WEIGHTS))
    for name, p in model.named_parameters():  # the base is frozen: only the adapter trains (and is uploaded)
        p.requires_grad_(".lora_" in name)
    return ckpt


def _load_adapter_weights(ckpt: TextCheckpoint, params: dict[str, Any], state: dict[str, Any], source: str) -> None:
    import torch

    expected = {ckpt.update_key(n) for n in params if ".lora_" in n}
    missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or extra:
        raise InputError(f"{source}: " + (f"missing {missing[0]!r} ({len(missing)} in all)" if missing else
                                          f"holds {extra[0]!r}, which the adapter config does not make ({len(extra)} in all)"))
    with torch.no_grad():
        for key, value in state.items():
            p = params[ckpt.param_key(key)]
            if tuple(value.shape) != tuple(p.shape):
                raise InputError(f"{source}: {key!r} has shape {list(value.shape)}, the adapter's is {list(p.shape)}")
            if not torch.isfinite(value).all():
                raise InputError(f"{source}: {key!r} contains NaN or Inf")
            p.copy_(value)


def save_text_adapter(path: str | Path, ckpt: TextCheckpoint, config: dict[str, Any]) -> Path:
    """Write ``ckpt``'s adapter as a PEFT folder (``config``: the adapter_config.json fields), each file atomically."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    state = {ckpt.update_key(n): p.detach().contiguous().clone() for n, p in ckpt.model.named_parameters() if ".lora_" in n}
    atomic_write_bytes(folder / ADAPTER_WEIGHTS, safetensors_bytes(state, {"format": "pt"}))
    atomic_write_text(folder / ADAPTER, json.dumps({"peft_type": "LORA", **config}, indent=1, sort_keys=True))
    return folder
