"""audit-round over a recorded round folder: labels per client, one summary, resume, corrupt clients, -j 2, Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.audit_round import make_round as benchmark_round

from .helpers import assert_one_error_line


def make_round(folder: Path, clients: int = 3, corrupt: bool = True) -> dict[str, list[int]]:
    """The benchmark's round folder (global LeNet, each client's weights after one SGD step on its 4 digits, aux
    digits beside it), plus a truncated file for one more client; returns the true labels by client."""
    truth = benchmark_round(folder, clients)
    if corrupt:
        good = next((folder / "clients").glob("*.safetensors")).read_bytes()
        (folder / "clients" / "broken.safetensors").write_bytes(good[: len(good) // 3])
    return truth


@pytest.fixture
def aux(tmp_path) -> Path:
    return tmp_path / "aux.safetensors"  # written by make_round beside the round folder


def _run(cli, round_dir, out, aux, *extra, expect=2):
    res = cli("audit-round", round_dir, "-o", out, "-n", "20", "--aux", aux, "-q", *extra, expect=expect)
    return json.loads(res.stdout), res


def test_a_round_is_audited_per_client_and_a_corrupt_client_is_its_own_error(cli, tmp_path, aux):
    truth = make_round(tmp_path / "round")
    doc, res = _run(cli, tmp_path / "round", tmp_path / "out", aux)
    rows = {r["client"]: r for r in doc["clients"]}
    assert rows["broken"]["status"] == "error" and rows["broken"]["exit"] == 2
    assert "broken" in res.stderr and len([ln for ln in res.stderr.splitlines() if ln.strip()]) == 1
    for name, labels in truth.items():
        assert rows[name]["status"] == "ok" and sorted(rows[name]["labels"]) == labels, (name, rows[name])
        assert rows[name]["band"] in ("low", "medium", "high", "very_high")
    assert doc["audited"] == 3 and sum(doc["histogram"].values()) == 3
    summary = json.loads((tmp_path / "out" / "audit_round.json").read_text())
    assert summary["worst_client"] in truth and summary["errors"][0]["client"] == "broken"
    html = (tmp_path / "out" / "audit_round.html").read_text()
    assert "The worst clients" in html and "data:image/png;base64," in html
    assert (tmp_path / "out" / "clients" / min(truth) / "ig" / "report.json").is_file()


def test_a_killed_round_resumes_without_redoing_finished_clients(cli, tmp_path, aux):
    make_round(tmp_path / "round", corrupt=False)
    out = tmp_path / "out"
    first, _ = _run(cli, tmp_path / "round", out, aux, "--fail-on", "never", expect=0)
    names = sorted(p.name for p in (out / "clients").iterdir())
    stamp = {c: (out / "clients" / c / "result.json").stat().st_mtime_ns for c in names}
    # as if killed while the last client ran: its marker is missing, its partial folder is left behind
    (out / "clients" / names[-1] / "result.json").unlink()
    again, _ = _run(cli, tmp_path / "round", out, aux, "--fail-on", "never", expect=0)
    assert again["resumed"] == 2 and again["audited"] == 3
    assert (out / "clients" / names[0] / "result.json").stat().st_mtime_ns == stamp[names[0]]
    assert (out / "clients" / names[-1] / "result.json").stat().st_mtime_ns != stamp[names[-1]]
    assert [r["labels"] for r in again["clients"]] == [r["labels"] for r in first["clients"]]
    # a stored result this version cannot read as a client's row (edited, damaged, from elsewhere): that client is
    # audited again, the round does not fail
    (out / "clients" / names[0] / "result.json").write_text('{"client": "x", "surprise": 1}')
    third, _ = _run(cli, tmp_path / "round", out, aux, "--fail-on", "never", expect=0)
    assert third["resumed"] == 2 and third["audited"] == 3
    assert [r["labels"] for r in third["clients"]] == [r["labels"] for r in first["clients"]]


def test_parallel_workers_give_the_same_rows(cli, tmp_path, aux):
    make_round(tmp_path / "round", corrupt=False)
    # one torch thread in both (float sums depend on the thread count, and so may a band near a cut point)
    one, _ = _run(cli, tmp_path / "round", tmp_path / "a", aux, "--fail-on", "never", "--threads", "1", expect=0)
    two, _ = _run(cli, tmp_path / "round", tmp_path / "b", aux, "--fail-on", "never", "-j", "2", expect=0)
    assert [(r["client"], r["labels"], r["band"]) for r in one["clients"]] == \
        [(r["client"], r["labels"], r["band"]) for r in two["clients"]]


def test_fail_on_tests_the_worst_client_and_bad_plans_are_refused(cli, tmp_path, aux):
    make_round(tmp_path / "round", corrupt=False)
    doc, res = _run(cli, tmp_path / "round", tmp_path / "a", aux, "--fail-on", "medium", expect=None)
    leaked = doc["worst_band"] in ("medium", "high", "very_high")
    assert res.exit_code == (1 if leaked else 0)
    assert res.stderr == ""  # -q: no lines but errors
    # each client's band is the upper end of its attack's estimated range (--gate upper, the default)
    row = json.loads(next((tmp_path / "a" / "clients").glob("*/result.json")).read_text())
    assert all(a["band"] == a["band_range"][1] for a in row["attacks"]), row["attacks"]
    res = cli("audit-round", tmp_path / "round", "-o", tmp_path / "b", "--attacks", "nope", expect=2)
    assert_one_error_line(res.stderr, "nope")
    res = cli("audit-round", tmp_path / "missing", "-o", tmp_path / "c", expect=2)
    assert_one_error_line(res.stderr, "does not exist")
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_audit_round_on_local_ray(cli, tmp_path, aux):
    pytest.importorskip("ray")
    truth = make_round(tmp_path / "round", corrupt=False)
    doc, _ = _run(cli, tmp_path / "round", tmp_path / "out", aux, "--ray", "-j", "2", "--fail-on", "never", expect=0)
    assert doc["audited"] == 3
    assert {r["client"]: sorted(r["labels"]) for r in doc["clients"]} == truth
    summary = json.loads((tmp_path / "out" / "audit_round.json").read_text())
    assert summary["engine"]["engine"] == "ray"


@pytest.mark.slow
def test_a_really_killed_round_resumes(tmp_path, aux):
    """SIGKILL the CLI once the first client is finished; the same command again audits only the rest."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from .helpers import ROOT

    truth = make_round(tmp_path / "round", clients=4, corrupt=False)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fedaudit", "audit-round", str(tmp_path / "round"), "-o", str(out), "-n", "300",
           "--aux", str(aux), "-q", "--fail-on", "never", "--threads", "1"]
    env = {**os.environ, "NO_COLOR": "1", "FEDAUDIT_PROXIES": "0"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and not list(out.glob("clients/*/result.json")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("clients/*/result.json")}
    assert 1 <= len(first) < 4, first
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["resumed"] == len(first) and doc["audited"] == 4
    assert {p.parent.name: p.stat().st_mtime_ns for p in out.glob("clients/*/result.json") if p.parent.name in first} == first
    assert {r["client"]: sorted(r["labels"]) for r in doc["clients"]} == truth


def test_a_round_self_checks_each_clients_labels(cli, tmp_path, aux):
    """``--self-check N`` with labelled aux images: each client's row and the page carry its reading's estimate."""
    make_round(tmp_path / "round", clients=2, corrupt=False)
    doc, res = _run(cli, tmp_path / "round", tmp_path / "out", aux, "--attacks", "none", "--self-check", "1", expect=0)
    summary = json.loads((tmp_path / "out" / "audit_round.json").read_text())
    checks = [r["label_self_check"] for r in summary["clients"]]
    assert len(checks) == 2 and all(0 <= c["InsAcc"] <= 1 and 0 <= c["floor"] <= 1 for c in checks), checks
    assert [c["label_self_check"] for c in doc["clients"]] == checks  # the JSON on stdout carries it too
    assert "label self-check:" in (tmp_path / "out" / "audit_round.html").read_text()


def test_client_file_names_become_safe_folders(cli, tmp_path, aux):
    """A client file named '...safetensors' made a client '..' that wrote its report into OUT itself."""
    make_round(tmp_path / "round", clients=1, corrupt=False)
    clients = tmp_path / "round" / "clients"
    only = next(clients.glob("*.safetensors"))
    only.rename(clients / "...safetensors")
    doc, res = _run(cli, tmp_path / "round", tmp_path / "out", aux, "--attacks", "none", expect=0)
    (name,) = [r["client"] for r in doc["clients"]]
    assert name.startswith("_.") and "/" not in name
    folder = tmp_path / "out" / "clients" / name
    assert (folder / "result.json").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["audit_round.html", "audit_round.json", "clients"]
