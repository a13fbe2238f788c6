"""Did every client of a round get the server's stated global model? Model inconsistency (Pasquini et al., CCS 2022:
one client gets an active model, the others a zeroed one, so secure aggregation returns that client's update) and
per-client models (LOKI, S&P 2024: each client its own convolution kernels in an otherwise shared model) are
invisible in any one client's files and found only across a round.

A round folder (what fedaudit.integrations.flower.RecordingStrategy writes): ``checkpoint.safetensors`` (the global
model the server says it sent), ``clients/<name>.safetensors`` (each update; its metadata names the sha256 of the
model the client trained from, ``fedaudit.base_checkpoint_sha256``, where the recorder or the capture knew it), and,
where a recorder kept them, ``received/<name>.safetensors``: the model each client actually received (a checkpoint
file, or a plain state_dict). Read:

* each update's recorded base against the global checkpoint's sha256 and against the other clients';
* each received model against the global model, tensor by tensor: which tensors differ, and the share of their
  entries that do. A difference confined to a few tensors and a small share of their entries is LOKI's per-client
  pattern; a received model whose weights are zeroed is Pasquini's inactive model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fedaudit.errors import InputError
from fedaudit.io.checkpoint import state_differences
from fedaudit.io.files import read_safetensors, sha256_file
from fedaudit.io.metadata import Meta
from fedaudit.models.digest import named_digest
from fedaudit.scan.finding import Finding

WHAT = "model inconsistency across clients (Pasquini et al.; LOKI's per-client kernels)"
RECOVERS = "one client's update out of a securely aggregated round, or each client's own through its own kernels"


def _state(path: Path, what: str) -> dict[str, torch.Tensor]:
    tensors, _ = read_safetensors(path, what)
    return tensors


def compare(global_state: dict[str, torch.Tensor], received: dict[str, torch.Tensor]) -> dict[str, Any]:
    """How a received model differs from the global one: tensors added, missing, changed (with the share of entries
    changed) and zeroed."""
    changed: dict[str, float] = {}
    zeroed = []
    for k, g in global_state.items():
        r = received.get(k)
        if r is None or tuple(r.shape) != tuple(g.shape):
            continue
        if g.is_floating_point():
            diff = (r.double() != g.double())
            share = float(diff.double().mean()) if diff.numel() else 0.0
            if share > 0:
                changed[k] = share
                if bool(g.any()) and not bool(r.any()):
                    zeroed.append(k)
    names = state_differences(global_state, received)
    return {"extra": sorted(names["unexpected"]), "missing": sorted(names["missing"]),
            "misshapen": sorted(names["misshapen"]),
            "changed": changed, "zeroed": zeroed,
            "weights": sum(1 for k, v in global_state.items() if v.is_floating_point() and v.ndim >= 2)}


def round_findings(round_dir: str | Path) -> tuple[list[Finding], dict[str, Any]]:
    """The round's findings and what was read (per client: its recorded base, its received model's digest and
    difference)."""
    folder = Path(round_dir)
    ckpt = folder / "checkpoint.safetensors"
    if not ckpt.is_file():
        raise InputError(f"round folder {str(folder)!r} has no checkpoint.safetensors (the global model)")
    sha = sha256_file(ckpt)
    global_state = _state(ckpt, "round checkpoint")
    global_digest = named_digest(global_state)
    clients = sorted((folder / "clients").glob("*.safetensors"))
    received_dir = folder / "received"
    read: dict[str, Any] = {"global_sha256": sha, "global_digest": global_digest, "clients": {}}
    findings: list[Finding] = []
    for path in clients:
        name = path.stem
        try:
            _, raw = read_safetensors(path, "update")
            base = Meta(raw, f"update {str(path)!r}").str("base_checkpoint_sha256")
        except InputError as exc:  # that client's own error row says it (audit-round); the others are still read
            read["clients"][name] = {"base_sha256": None, "base_matches": None, "error": str(exc)}
            continue
        row: dict[str, Any] = {"base_sha256": base, "base_matches": None if not base else base == sha}
        got = received_dir / path.name
        if got.is_file():
            try:
                state = _state(got, f"received model of {name}")
            except InputError as exc:
                row["received_error"] = str(exc)
            else:
                row["received_digest"] = named_digest(state)
                row["received_matches"] = row["received_digest"] == global_digest
                if not row["received_matches"]:
                    row["difference"] = compare(global_state, state)
        read["clients"][name] = row
        if row["base_matches"] is False:
            findings.append(Finding(
                "round-consistency", f"{name}: fedaudit.base_checkpoint_sha256", "the update's base model sha256 "
                "against the round's global checkpoint", 1.0, "every client of an honest round trains from the "
                "global model", "high", WHAT, RECOVERS,
                f"{name} trained from {str(base)[:12]}..., the round's global model is {sha[:12]}..."))
        diff = row.get("difference")
        if diff:
            findings.append(_received_finding(name, diff))
    bases = {r["base_sha256"] for r in read["clients"].values() if r["base_sha256"]}
    read["distinct_bases"] = len(bases)
    digests = {r.get("received_digest") for r in read["clients"].values() if r.get("received_digest")}
    read["distinct_received"] = len(digests)
    if not any(r["base_sha256"] or r.get("received_digest") for r in read["clients"].values()):
        read["note"] = ("no client recorded the model it received (no fedaudit.base_checkpoint_sha256, no received/ "
                        "folder): the round's consistency cannot be checked")
    return findings, read


def _received_finding(name: str, diff: dict[str, Any]) -> Finding:
    changed = diff["changed"]
    weights_changed = [k for k in changed if k.endswith("weight")]
    sparse = bool(changed) and max(changed.values()) <= 0.25 and len(changed) <= max(1, diff["weights"] // 4)
    if diff["zeroed"]:
        how = f"{len(diff['zeroed'])} tensor(s) zeroed (Pasquini's inactive model): {', '.join(diff['zeroed'][:4])}"
    elif diff["extra"] or diff["missing"] or diff["misshapen"]:
        how = (f"another architecture: {len(diff['extra'])} extra, {len(diff['missing'])} missing, "
               f"{len(diff['misshapen'])} misshapen tensor(s)")
    elif sparse:
        how = (f"a sparse per-client change (LOKI): {len(changed)} tensor(s), at most "
               f"{100 * max(changed.values()):.1f}% of their entries: {', '.join(sorted(changed)[:4])}")
    else:
        how = f"{len(changed)} tensor(s) differ ({len(weights_changed)} weights)"
    first = (diff["zeroed"] or diff["extra"] or diff["missing"] or diff["misshapen"] or sorted(changed) or ["?"])[0]
    return Finding("round-consistency", f"{name}: {first}", "the model this client received against the round's "
                   "global model", float(len(changed) + len(diff["extra"]) + len(diff["missing"])),
                   "0 tensors: every client of an honest round receives the global model", "high", WHAT, RECOVERS,
                   how, {k: v for k, v in diff.items() if k != "changed"} | {"changed": dict(sorted(changed.items())[:32])})
