"""Where the clients of a round audit run: in this process, a local process pool, or Ray.

* ``-j 1``: in this process, one client after the other.
* ``-j N``: a ``ProcessPoolExecutor`` of N spawned workers (spawn, not fork: torch's thread pools do not survive a
  fork), each with ``threads`` torch threads.
* ``--ray`` / ``--ray-address ADDR``: one Ray task per client (``num_cpus=1``, ``num_gpus=--gpus-per-task``) on a
  local Ray started here, or on the cluster at ADDR (``auto``: the one ``ray start`` made on this machine). Ray is an
  optional extra (``pip install 'fedaudit[ray]'``); every node must have fedaudit and the round's files at the
  same paths (a shared file system).

Each finished row is handed to ``on_done`` as it arrives (so the summary on disk is always current).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from fedaudit.errors import InputError
from fedaudit.jobs.round_client import audit_client

Row = dict[str, Any]


def run_local(tasks: list[Row], jobs: int, on_done: Callable[[Row], None]) -> None:
    if jobs <= 1:
        for task in tasks:
            on_done(audit_client(task))
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(audit_client, t): t for t in tasks}
        for future in as_completed(futures):
            on_done(future.result())


def run_ray(tasks: list[Row], address: str | None, gpus_per_task: float, on_done: Callable[[Row], None],
            cpus: int | None = None) -> dict[str, Any]:
    """Run on Ray; returns what the report says about the cluster."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'fedaudit[ray]'") from None
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False,
                                  "ignore_reinit_error": True}
        if address is None and cpus:
            kwargs["num_cpus"] = cpus
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(f"cannot start or reach Ray at {address or 'a new local instance'}: {exc}") from None
    try:
        resources = ray.cluster_resources()
        remote = ray.remote(num_cpus=1, num_gpus=gpus_per_task)(audit_client)
        pending = [remote.remote(t) for t in tasks]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            on_done(ray.get(done[0]))
        return {"engine": "ray", "address": address or "local", "version": ray.__version__,
                "cluster_cpus": resources.get("CPU"), "cluster_gpus": resources.get("GPU", 0.0),
                "gpus_per_task": gpus_per_task}
    finally:
        if started:
            ray.shutdown()
