"""Record what a Flower server receives, as fedaudit files: ``RecordingStrategy`` wraps any Flower strategy of
the Message API (``flwr.serverapp.strategy``, the API Flower 1.2x-1.4x recommends) and writes, per round,

    OUT/round_001/checkpoint.safetensors          the global model sent to the clients (fedaudit checkpoint)
    OUT/round_001/clients/<client>.safetensors    every client's returned weights (a fedaudit ``weights`` update;
                                                  ``client<ID>`` when it reports an id, else ``node<node id>``)
    OUT/round_001/received/<client>.safetensors   the model a client received, only where it is not the global one
    OUT/round_001/round.json                      the round's manifest (clients, config sent, what is unknown, the
                                                  digest of the model each client received)

Each update records the sha256 of the model its client trained from (``base_checkpoint_sha256``: the global
checkpoint's, or that of the ``received/`` file when the strategy sent that client another model), so that
``fedaudit scan ROUND`` and ``audit-round`` can tell a round where one client got a tailored model (docs/scan.md).

Each update's metadata comes from the client's reply: ``num-examples`` (Flower's FedAvg weight) and the training
facts that ``training_facts`` adds to the client's MetricRecord (batch size, local steps, lr, momentum, weight
decay, BatchNorm mode); the lr falls back to the ``lr`` of the config the server sent; anything else the client did
not report is recorded as unknown (``round.json`` lists it) and ``audit-round`` asks for it (e.g. ``-b``).
Writes are atomic; the wrapped strategy aggregates exactly the replies it would have without the wrapper.

Needs ``pip install 'fedaudit[flower]'``; importing this module without Flower raises ImportError with that hint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from fedaudit.io.checkpoint import save_checkpoint
from fedaudit.io.files import atomic_write_bytes, sha256_file, write_safetensors
from fedaudit.io.update import UpdateMeta, save_update
from fedaudit.models import ModelSpec, build_model
from fedaudit.models.digest import named_digest

try:
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
    from flwr.serverapp import Grid
    from flwr.serverapp.strategy import Strategy
except ImportError as exc:  # an optional extra: say how to get it
    raise ImportError("fedaudit.integrations.flower needs Flower: pip install 'fedaudit[flower]'") from exc

PREFIX = "fedaudit-"
FACTS = ("batch-size", "local-steps", "lr", "momentum", "weight-decay", "bn-train")


def training_facts(batch_size: int, local_steps: int, lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                   bn_mode: str = "train", client_id: int | None = None) -> dict[str, int | float]:
    """The client-side helper: entries to merge into the train reply's MetricRecord so that the recorded update
    says how it was produced (Flower does not echo local epochs or batch size back). ``client_id`` (e.g. the
    simulation's partition id) names the recorded file ``client<ID>`` instead of ``node<node id>``."""
    if bn_mode not in ("train", "eval"):
        raise ValueError("bn_mode must be 'train' or 'eval'")
    facts: dict[str, int | float] = {
        PREFIX + "batch-size": int(batch_size), PREFIX + "local-steps": int(local_steps), PREFIX + "lr": float(lr),
        PREFIX + "momentum": float(momentum), PREFIX + "weight-decay": float(weight_decay),
        PREFIX + "bn-train": int(bn_mode == "train")}
    if client_id is not None:
        facts[PREFIX + "client"] = int(client_id)
    return facts


def round_dir(out: Path, server_round: int) -> Path:
    return out / f"round_{server_round:03d}"


class RecordingStrategy(Strategy):
    """``strategy`` unchanged, plus the recording above. ``spec`` names the architecture (a registered one, e.g.
    ``ModelSpec("lenet", 10, (3, 32, 32), mean, std)``) so that the checkpoint can be rebuilt from the arrays."""

    def __init__(self, strategy: Strategy, out_dir: str | Path, spec: ModelSpec, arrayrecord_key: str = "arrays",
                 metricrecord_key: str = "metrics"):
        self.strategy, self.out, self.spec = strategy, Path(out_dir), spec
        self.arrays_key, self.metrics_key = arrayrecord_key, metricrecord_key
        self._config: dict[int, dict[str, Any]] = {}
        self._global: dict[int, tuple[str, str]] = {}  # round -> (the checkpoint's sha256, its tensors' digest)
        # round -> node -> (the digest of what that node was sent, its state when it is not the global model)
        self._sent: dict[int, dict[int, tuple[str, dict[str, torch.Tensor] | None]]] = {}

    # --- recording ---------------------------------------------------------------------------------------------
    def _state(self, arrays: ArrayRecord) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu() for k, v in arrays.to_torch_state_dict().items()}

    def _record_global(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord) -> None:
        model = build_model(self.spec)
        model.load_state_dict(self._state(arrays))
        folder = round_dir(self.out, server_round)
        (folder / "clients").mkdir(parents=True, exist_ok=True)
        save_checkpoint(folder / "checkpoint.safetensors", model, self.spec)
        self._global[server_round] = (sha256_file(folder / "checkpoint.safetensors"), named_digest(model.state_dict()))
        self._config[server_round] = {k: v for k, v in dict(config).items() if isinstance(v, (int, float, str, bool))}

    def _record_sent(self, server_round: int, messages: list[Message]) -> None:
        """The digest of the model each train message carries; a model other than the global one is kept."""
        _, global_digest = self._global[server_round]
        sent = self._sent.setdefault(server_round, {})
        for msg in messages:
            if self.arrays_key not in msg.content.array_records:
                continue
            state = self._state(msg.content[self.arrays_key])
            digest = named_digest(state)
            sent[int(msg.metadata.dst_node_id)] = (digest, None if digest == global_digest else state)

    def _meta(self, metrics: dict[str, Any], config: dict[str, Any], node: int, server_round: int) -> tuple[UpdateMeta, list[str]]:
        def fact(name: str) -> Any:
            return metrics.get(PREFIX + name)

        lr = fact("lr") if fact("lr") is not None else config.get("lr")
        unknown = [n for n in FACTS if fact(n) is None and not (n == "lr" and lr is not None)]
        bn = fact("bn-train")
        meta = UpdateMeta(
            kind="weights", batch_size=None if fact("batch-size") is None else int(fact("batch-size")),
            local_steps=int(fact("local-steps") or 1), local_lr=None if lr is None else float(lr),
            num_examples=None if metrics.get("num-examples") is None else int(metrics["num-examples"]),
            bn_mode=None if bn is None else ("train" if int(bn) else "eval"),
            optimizer={"name": "sgd", "momentum": float(fact("momentum") or 0.0),
                       "weight_decay": float(fact("weight-decay") or 0.0)},
            source={"framework": "flwr", "round": server_round, "node": node, "message_type": "train",
                    "unknown": unknown})
        return meta, unknown

    def _record_replies(self, server_round: int, replies: list[Message]) -> None:
        folder = round_dir(self.out, server_round)
        config = self._config.get(server_round, {})
        clients = []
        for msg in replies:
            node = int(msg.metadata.src_node_id)
            if msg.has_error() or self.arrays_key not in msg.content.array_records:
                clients.append({"node": node, "recorded": False, "why": "error reply or no arrays"})
                continue
            metrics_rec = msg.content.metric_records.get(self.metrics_key, MetricRecord())
            metrics = dict(metrics_rec)
            meta, unknown = self._meta(metrics, config, node, server_round)
            name = f"client{int(metrics[PREFIX + 'client'])}" if PREFIX + "client" in metrics else f"node{node}"
            digest, other = self._sent.get(server_round, {}).get(node, (None, None))
            meta.base_checkpoint_sha256 = self._global[server_round][0] if digest is not None else None
            if other is not None:  # this client was sent another model: keep it, and say the update came from it
                received = folder / "received" / f"{name}.safetensors"
                received.parent.mkdir(exist_ok=True)
                write_safetensors(received, other, {"fedaudit.file": '"received"'})
                meta.base_checkpoint_sha256 = sha256_file(received)
            save_update(folder / "clients" / f"{name}.safetensors", self._state(msg.content[self.arrays_key]), meta)
            clients.append({"node": node, "client": name, "recorded": True, "unknown": unknown,
                            "num_examples": meta.num_examples, "received_digest": digest,
                            "received_global": None if digest is None else other is None})
        manifest = {"fedaudit.file": "flower_round", "round": server_round, "strategy": type(self.strategy).__name__,
                    "arch": self.spec.arch, "config_sent": config, "global_digest": self._global.get(server_round, (None, None))[1],
                    "clients": clients}
        atomic_write_bytes(folder / "round.json", (json.dumps(manifest, indent=2) + "\n").encode())

    # --- the Strategy interface: delegate, recording on the way --------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        self._record_global(server_round, arrays, config)
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self._record_sent(server_round, messages)
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)  # a generator is read once: record, then hand the same list on
        self._record_replies(server_round, replies)
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.strategy.summary()
