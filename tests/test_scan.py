"""`fedaudit scan` (issue 89): each malicious construction, written here from its paper (breaching's own builds are in
benchmarks/scan.py), is flagged at the highest severity; the shipped samples are not; SARIF, HTML and exit codes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from fedaudit.io.checkpoint import spec_metadata
from fedaudit.io.files import write_safetensors
from fedaudit.jobs.scan import ScanJob, fails
from fedaudit.models import ModelSpec, build_model
from fedaudit.scan.checks.trap_rows import paired_share
from fedaudit.scan.rows import copy_groups

from .helpers import SAMPLE_NAMES, SAMPLES

SPEC = ModelSpec("lenet", 10, (3, 32, 32), (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def _save(path: Path, state: dict[str, torch.Tensor], spec: ModelSpec = SPEC) -> Path:
    return write_safetensors(path, {k: v.detach().contiguous().clone() for k, v in state.items()}, spec_metadata(spec))


def _lenet(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(SPEC)


def _imprint(bins: int = 16, n: int = 3 * 32 * 32) -> dict[str, torch.Tensor]:
    """Robbing the Fed's block: every row the same query (the image's mean), biases the negated quantiles of a Normal
    (a ladder of bins), the second layer all ones back to the image."""
    from statistics import NormalDist

    w = torch.ones(bins, n) / n
    b = torch.tensor([-(NormalDist().inv_cdf(i / bins) if i else -10.0) for i in range(bins)]) * 0.1
    return {"imprint.linear0.weight": w, "imprint.linear0.bias": b,
            "imprint.linear1.weight": torch.ones(n, bins), "imprint.linear1.bias": torch.zeros(n)}


def _trap(rows: int = 8, n: int = 3 * 32 * 32, s: float = 0.95) -> torch.Tensor:
    """Boenisch et al.'s trap weights: half of each row Gaussian draws, the other half the same draws times -s."""
    g = torch.Generator().manual_seed(3)
    out = torch.empty(rows, n)
    for r in range(rows):
        perm = torch.randperm(n, generator=g)
        a = torch.randn(n // 2, generator=g) * 0.5
        out[r, perm[: n // 2]] = a
        out[r, perm[n // 2:]] = -s * a
    return out


def _scan(path: Path, **kw) -> dict:
    return ScanJob(path, **kw).run()


def _checks(doc: dict, severity: str = "high") -> set[str]:
    return {f["check"] for f in doc["findings"] if f["severity"] == severity}


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_no_shipped_sample_is_flagged_high_or_medium(name):
    doc = _scan(SAMPLES / name / "checkpoint.safetensors")
    assert doc["severity"] in ("none", "info"), doc["findings"]
    assert doc["model_built"] and "d_snr" in doc["measured"]


def test_an_inserted_imprint_block_is_flagged_by_its_rows_its_ladder_and_the_declaration(tmp_path):
    state = {**_lenet().state_dict(), **_imprint()}
    doc = _scan(_save(tmp_path / "imprint.safetensors", state))
    assert doc["built_to_leak"] and {"duplicate-rows", "bias-ladder", "declared-architecture"} <= _checks(doc)
    arch = next(f for f in doc["findings"] if f["check"] == "declared-architecture")
    assert "imprint.linear0.weight" in arch["extra"]["unexpected"] and not doc["model_built"]


def test_a_plain_state_dict_is_read_on_its_tensors_alone(tmp_path):
    from safetensors.torch import save_file

    p = tmp_path / "plain.safetensors"
    save_file({k: v.contiguous() for k, v in _imprint().items()}, str(p))
    doc = _scan(p)
    assert doc["kind"] == "state_dict" and {"duplicate-rows", "bias-ladder"} <= _checks(doc)
    assert any("no fedaudit metadata" in n for n in doc["notes"])


def test_trap_weights_are_paired_and_gaussian_rows_are_not():
    share = paired_share(_trap())
    assert bool((share >= 0.99).all())
    g = torch.Generator().manual_seed(0)
    assert float(paired_share(torch.randn(64, 3072, generator=g, dtype=torch.float64)).max()) < 0.05
    # w and -w (a cosine query, an antisymmetric kernel) is not a trap factor: that is the duplicate-row check's
    sym = torch.randn(4, 100, generator=g)
    assert float(paired_share(torch.cat([sym, -sym], 1)).max()) < 0.1  # the candidate pair itself only


def test_a_trap_layer_is_flagged(tmp_path):
    state = {**_lenet().state_dict(), "trap.weight": _trap(), "trap.bias": torch.zeros(8)}
    doc = _scan(_save(tmp_path / "trap.safetensors", state))
    assert "trap-rows" in _checks(doc)


def test_copies_are_found_up_to_scale_and_sign_and_distinct_rows_are_not():
    g = torch.Generator().manual_seed(1)
    m = torch.randn(40, 50, generator=g, dtype=torch.float64)
    m[7] = -3.0 * m[2]
    m[30] = 0.5 * m[2]
    m[11] = 0.0  # zeroed rows are not copies of each other
    m[12] = 0.0
    assert [sorted(grp) for grp in copy_groups(m)] == [[2, 7, 30]]
    assert copy_groups(torch.randn(500, 64, generator=g, dtype=torch.float64)) == []


def test_a_linearised_stack_is_flagged_and_identity_batchnorm_alone_is_only_info(tmp_path):
    torch.manual_seed(0)
    spec = ModelSpec("resnet10", 10, (3, 32, 32), (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    model = build_model(spec)
    fresh = _scan(_save(tmp_path / "fresh.safetensors", model.state_dict(), spec), probe_size=0)
    assert fresh["severity"] == "info"  # every BatchNorm at identity: random initialisation looks like this
    state = model.state_dict()
    first = next(k for k, v in state.items() if v.ndim == 4)
    nn.init.dirac_(state[first])
    for k, v in state.items():
        if v.ndim == 4 and k != first:
            v.zero_()
    doc = _scan(_save(tmp_path / "linear.safetensors", state, spec), probe_size=0)  # D-SNR is not this test's
    lin = [f for f in doc["findings"] if f["check"] == "linearised-stack"]
    assert {f["severity"] for f in lin} == {"high"} and len(lin) == 3
    assert any(f["check"] == "transmit-snr" and f["value"] == "inf" for f in doc["findings"])


def test_fishing_classifiers_are_flagged(tmp_path):
    model = _lenet()
    state = model.state_dict()
    w, b = state["fc.weight"], state["fc.bias"]
    # breaching's class attack: the other classes' rows zeroed, their biases pushed to +1000
    cls = {**state, "fc.weight": torch.where(torch.arange(10)[:, None] == 0, w, 0.0),
           "fc.bias": torch.where(torch.arange(10) == 0, b, 1000.0)}
    doc = _scan(_save(tmp_path / "cls.safetensors", cls))
    assert doc["built_to_leak"] and "classifier-scale" in _checks(doc)
    one = {**state, "fc.weight": w.clone()}
    one["fc.weight"][3] *= 50  # one class's row far beyond the others
    assert "classifier-scale" in _checks(_scan(_save(tmp_path / "row.safetensors", one)))


def test_d_snr_reads_one_dominant_sample():
    from fedaudit.scan.checks.disaggregation_snr import d_snr

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 4))
    x = torch.rand(8, 12)
    y = torch.arange(8) % 4
    calm, _ = d_snr(model, x, y)
    x[5] *= 1000  # one sample's gradient a thousand times the others'
    loud, layer = d_snr(model, x, y)
    assert calm < 0.5 < 2.0 < loud and layer == "1.weight"


def test_the_cli_exits_1_at_fail_on_and_writes_sarif_and_html(cli, tmp_path):
    bad = _save(tmp_path / "imprint.safetensors", {**_lenet().state_dict(), **_imprint()})
    out, html = tmp_path / "scan.sarif", tmp_path / "scan.html"
    cli("scan", bad, "--format", "sarif", "-o", out, "--html", html, "--fail-on", "high", "-q", expect=1)
    log = json.loads(out.read_text())
    run = log["runs"][0]
    assert log["version"] == "2.1.0" and run["invocations"][0]["exitCode"] == 1
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels["fedaudit.scan/duplicate-rows"] == "error"
    assert all(r["ruleIndex"] < len(run["tool"]["driver"]["rules"]) for r in run["results"])
    assert "imprint.linear0.weight" in html.read_text()
    ok = cli("scan", SAMPLES / "lenet_b1" / "checkpoint.safetensors", "--fail-on", "medium")
    assert cli.json(ok)["severity"] == "none" and cli.json(ok)["command"] == "scan"
    assert not fails(cli.json(ok), "info")


def test_bad_input_is_one_line_and_exit_2(cli, tmp_path):
    r = cli("scan", tmp_path / "missing.safetensors", expect=2)
    assert r.stderr.count("\n") == 1
    r = cli("scan", SAMPLES / "lenet_b1" / "update.safetensors", expect=2)
    assert "recorded update" in r.stderr
    (tmp_path / "t.safetensors").write_bytes(b"\x00" * 10)
    cli("scan", tmp_path / "t.safetensors", expect=2)


def test_a_gpt2_folder_scans_and_a_malicious_transformer_layer_is_flagged(tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    src = SAMPLES / "gpt2_tiny_b4" / "checkpoint"
    assert _scan(src)["severity"] in ("none", "info")
    folder = tmp_path / "gpt2"
    shutil.copytree(src, folder)
    state = load_file(str(folder / "model.safetensors"))
    fc = "transformer.h.0.mlp.c_fc.weight"  # Conv1D: (in, out); Decepticons sets every unit's row to one vector
    v = torch.randn(state[fc].shape[0])
    state[fc] = v[:, None].expand_as(state[fc]).contiguous()
    bias = fc[: -len("weight")] + "bias"
    state[bias] = -torch.linspace(-2, 2, state[bias].numel())
    save_file(state, str(folder / "model.safetensors"))
    doc = _scan(folder)
    assert {"duplicate-rows", "bias-ladder"} <= _checks(doc) and doc["kind"] == "text"
    assert math.isfinite(doc["seconds_total"])


def _imprint_case(tmp_path, cli, bins: int = 256, b: int = 4):
    """An update of ``b`` sample images recorded through fedaudit's imprint architecture (a model built to leak)."""
    from fedaudit.io.checkpoint import save_checkpoint

    spec = ModelSpec("imprint", 10, (3, 32, 32), (0.4914, 0.4822, 0.4465), (0.247, 0.2435, 0.2616),
                     {"base": "lenet", "bins": bins, "sigma": 0.5})
    torch.manual_seed(0)
    ck = tmp_path / "imprint.safetensors"
    save_checkpoint(ck, build_model(spec), spec)
    truth = SAMPLES / "lenet_b4" / "truth.safetensors"
    cli("capture", ck, truth, "-b", b, "-o", tmp_path / "u.safetensors", "--truth-out", tmp_path / "t.safetensors", "-q")
    return ck, tmp_path / "u.safetensors", tmp_path / "t.safetensors"


def test_reconstruct_imprint_recovers_a_batch_exactly_and_measures_very_high(cli, tmp_path):
    ck, upd, truth = _imprint_case(tmp_path, cli)
    out = cli.json(cli("reconstruct", "imprint", ck, upd, "-o", tmp_path / "out", "--truth", truth, "-q"))
    assert out["risk_band"] == "very_high" and out["identification"]["identified"] == 4
    assert out["summary"]["psnr"]["min"] >= 40.0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["attack"]["name"] == "imprint"
    # the checkpoint it came through is flagged before any client trains on it (its architecture is declared: the
    # rows and the ladder give it away)
    doc = _scan(ck)
    assert doc["built_to_leak"] and {"duplicate-rows", "bias-ladder"} <= _checks(doc)
    assert "declared-architecture" not in _checks(doc)


def test_imprint_is_not_applicable_on_an_honest_model_and_says_why(cli, tmp_path):
    s = SAMPLES / "lenet_b4"
    r = cli("reconstruct", "imprint", s / "checkpoint.safetensors", s / "update.safetensors", "-o", tmp_path / "o",
            "-q", expect=None)
    assert r.exit_code == 2 and "not applicable" in r.stderr and "imprint layer" in r.stderr


def test_the_imprint_solve_reads_differences_of_consecutive_bins():
    """Two images in two different bins come back exactly; the third bin's difference is empty (skipped)."""
    from types import SimpleNamespace

    from fedaudit.attacks.imprint import solve

    spec = ModelSpec("imprint", 10, (1, 2, 2), (0.0,), (1.0,), {"base": "mlp", "bins": 3, "query": "mean",
                                                                  "base_kwargs": {"hidden": [4]}})
    model = build_model(spec)
    layer = model.imprint.linear0
    x = torch.tensor([[0.1, 0.2, 0.3, 0.4], [2.0, 2.0, 2.0, 2.0]], dtype=torch.float64)  # projections 0.25, 2.0
    t = -layer.bias.detach().double() / layer.weight.detach().double().norm(dim=1)
    q = layer.weight[0].detach().double() / layer.weight[0].detach().double().norm()
    active = (x @ q)[:, None] > t[None, :]  # [image, unit]
    c = torch.tensor([0.7, -1.3], dtype=torch.float64)  # each image's upstream gradient, the same for every unit
    g_w = (active.double() * c[:, None]).T @ x
    g_b = (active.double() * c[:, None]).sum(0)
    tm = SimpleNamespace(model=model, spec=spec, gradient={"imprint.linear0.weight": g_w, "imprint.linear0.bias": g_b})
    images, diag = solve(tm, "imprint.linear0", 2)
    got = sorted(images.reshape(2, -1).tolist())
    assert torch.allclose(torch.tensor(got, dtype=torch.float64), x, atol=1e-9)
    assert diag["non_empty_bins"] == 2 and diag["recovered"] == 2


def _round(folder: Path, tailored: str | None = None, received: bool = True) -> Path:
    """A round of three LeNet clients captured from the global checkpoint (each update records its base's sha256);
    ``tailored``: "loki" gives client001 its own first-layer kernels, "zeroed" gives it a zeroed model (Pasquini)."""
    from fedaudit.client.capture import CaptureConfig, capture_update
    from fedaudit.io.checkpoint import save_checkpoint
    from fedaudit.io.files import sha256_file
    from fedaudit.io.truth import load_truth
    from fedaudit.io.update import save_update

    truth = load_truth(SAMPLES / "lenet_b4" / "truth.safetensors")
    model = _lenet()
    (folder / "clients").mkdir(parents=True)
    (folder / "received").mkdir()
    save_checkpoint(folder / "checkpoint.safetensors", model, SPEC)
    sha = sha256_file(folder / "checkpoint.safetensors")
    for c in range(3):
        got = model
        if c == 1 and tailored:
            got = _lenet()
            with torch.no_grad():
                if tailored == "loki":  # this client's own kernels in one output channel of the first layer
                    got.body[0].weight[0].normal_()
                else:
                    for p in got.parameters():
                        p.zero_()
            save_checkpoint(folder / "tailored.safetensors", got, SPEC)
        base = sha256_file(folder / "tailored.safetensors") if got is not model else sha
        cap = capture_update(got, SPEC, truth.images[c:c + 1], truth.labels[c:c + 1], CaptureConfig(batch_size=1),
                             base_sha256=base)
        save_update(folder / "clients" / f"client{c:03d}.safetensors", cap.tensors, cap.meta)
        if received:
            _save(folder / "received" / f"client{c:03d}.safetensors", got.state_dict())
    (folder / "tailored.safetensors").unlink(missing_ok=True)
    return folder


def test_an_honest_round_is_consistent_and_a_tailored_client_is_found(tmp_path):
    honest = _scan(_round(tmp_path / "honest"))
    assert not [f for f in honest["findings"] if f["check"] == "round-consistency"]
    assert honest["round"]["distinct_bases"] == 1 and honest["round"]["distinct_received"] == 1
    loki = _scan(_round(tmp_path / "loki", "loki"))
    found = [f for f in loki["findings"] if f["check"] == "round-consistency"]
    assert loki["built_to_leak"] and {f["tensor"].split(":")[0] for f in found} == {"client001"}
    assert any("sparse per-client change" in f["detail"] and "body.0.weight" in f["detail"] for f in found)
    zeroed = _scan(_round(tmp_path / "zeroed", "zeroed", received=True))
    assert any("zeroed" in f["detail"] for f in zeroed["findings"] if f["check"] == "round-consistency")


def test_a_round_without_recorded_bases_says_it_cannot_be_checked(tmp_path):
    from safetensors.torch import load_file

    folder = _round(tmp_path / "r", received=False)
    for p in (folder / "clients").glob("*.safetensors"):  # an update without its base's sha256
        from fedaudit.io.update import load_update, save_update

        u = load_update(p)
        u.meta.base_checkpoint_sha256 = None
        save_update(p, load_file(str(p)), u.meta)
    doc = _scan(folder)
    assert any("cannot be checked" in n for n in doc["notes"])


def test_audit_round_reads_the_round_before_any_client_and_fails_on_a_tailored_model(cli, tmp_path):
    folder = _round(tmp_path / "loki", "loki")
    r = cli("audit-round", folder, "-o", tmp_path / "out", "--attacks", "none", "--labels", "idlg", "--fail-on",
            "high", expect=1)
    doc = cli.json(r)
    assert doc["server_severity"] == "high" and doc["server_findings"][0]["tensor"].startswith("client001")
    assert "client001" in r.stderr and "other than the global one" in r.stderr
    record = json.loads((tmp_path / "out" / "audit_round.json").read_text())
    assert record["server"]["severity"] == "high"


def test_a_zero_initialised_head_is_not_fishing(tmp_path):
    """torchvision's ViTs start with a zero head: every row zero is an initialisation, not a class attack (a held-out
    benign checkpoint flagged it before this rule)."""
    state = _lenet().state_dict()
    state["fc.weight"] = torch.zeros_like(state["fc.weight"])
    state["fc.bias"] = torch.zeros_like(state["fc.bias"])
    doc = _scan(_save(tmp_path / "zero_head.safetensors", state))
    assert doc["severity"] in ("none", "info") and any("zero-initialised head" in n for n in doc["notes"])


def test_the_probe_takes_the_reviewers_images(cli, tmp_path):
    ck = SAMPLES / "lenet_b4" / "checkpoint.safetensors"
    doc = cli.json(cli("scan", ck, "--aux", "builtin:cifar100", "--probe", "4", "-q"))
    assert doc["probe"] == "builtin:cifar100" and doc["measured"]["d_snr"]["probe"] == 4
    assert "d_snr" not in cli.json(cli("scan", ck, "--probe", "0", "-q"))["measured"]
    r = cli("scan", SAMPLES / "gpt2_tiny_b4" / "checkpoint", "--aux", "builtin:cifar10", expect=2)
    assert "--aux is for image checkpoints" in r.stderr


def test_a_lora_adapter_is_scanned_on_its_base_with_its_own_tensors(cli, tmp_path):
    """A PEFT adapter folder with --base: the base's weights and the adapter's (``adapter:...``) are read; an adapter
    alone names the base it needs (exit 2)."""
    from .helpers import text_adapter

    base = SAMPLES / "gpt2_tiny_b4" / "checkpoint"
    adapter = text_adapter(base, tmp_path / "adapter", 4)
    doc = cli.json(cli("scan", adapter, "--base", base, "-q"))
    assert doc["kind"] == "text" and doc["severity"] in ("none", "info") and doc["model_built"]
    assert doc["tensors"] > cli.json(cli("scan", base, "-q"))["tensors"]  # the adapter's tensors were read too
    r = cli("scan", adapter, expect=2)
    assert "without its base model" in r.stderr
