"""``fedaudit audit CKPT UPDATE --truth T --attacks ig,fedleak --defenses none,prune:0.5,dp:eps=100 -o OUT``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import torch
import typer

from fedaudit.attacks import ATTACKS
from fedaudit.audit.matrix import AuditPlan, run_audit
from fedaudit.cli.console import emit_json, info_line
from fedaudit.cli.errors import fail_exit, handle_errors
from fedaudit.cli.options import (AllowCustomArchOpt, CheckpointArg, DeviceOpt, FailOn, FailOnOpt, ForceOpt,
                                  IgnoreBaseOpt, LpipsNet, LpipsNetOpt, LpipsWeightsOpt, QuietOpt, SeedOpt, UpdateArg)
from fedaudit.defenses.run import parse_defense
from fedaudit.device import resolve_device
from fedaudit.errors import EXIT_INTERRUPTED, InputError
from fedaudit.io.files import dumps_json
from fedaudit.io.images import load_images, parse_labels
from fedaudit.io.truth import load_truth
from fedaudit.labels import LABEL_METHODS
from fedaudit.labels.base import LabelContext
from fedaudit.labels.run import load_aux
from fedaudit.methods import parse_spec
from fedaudit.report.audit_html import render_audit_html
from fedaudit.report.document import new_report
from fedaudit.report.outdir import OutputDir
from fedaudit.threat_model import load_threat_model


def parse_defenses(text: str) -> list[tuple[str, list]]:
    """'none,prune:0.5,dp:eps=100+quantize:8' -> rows; '+' chains defenses within one row."""
    rows = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        rows.append((item, [] if item == "none" else [parse_defense(part) for part in item.split("+")]))
    if not rows:
        raise InputError("--defenses is empty (use 'none' for the undefended update)")
    return rows


LOOP_KEYS = {"lr": float, "schedule": str, "iterations": int, "restarts": int}


def parse_attack_options(specs: list[str]) -> dict[str, dict]:
    """'fedleak:lr=0.03:tv=0.2' -> {"fedleak": {"lr": 0.03, "tv": 0.2}}: only the keys given (loop keys too)."""
    out: dict[str, dict] = {}
    for spec in specs:
        name, *parts = spec.strip().split(":")
        loop = {}
        rest = []
        for part in parts:
            key, _, value = part.partition("=")
            if key in LOOP_KEYS and value:
                try:
                    loop[key] = LOOP_KEYS[key](value)
                except ValueError:
                    raise InputError(f"{name!r}: {key}={value!r} is not a valid {LOOP_KEYS[key].__name__}") from None
            else:
                rest.append(part)
        _, opts = parse_spec(ATTACKS, ":".join([name, *rest]))
        given = {p.split("=", 1)[0] for p in rest}
        out.setdefault(name, {}).update({k: v for k, v in opts.items() if k in given}, **loop)
    return out


def register(app) -> None:
    @app.command("audit")
    @handle_errors
    def audit(
        checkpoint: CheckpointArg,
        update: UpdateArg,
        truth: Annotated[Path, typer.Option("--truth", "-t", help="The client's images and labels: the defenses' batch and the metrics' reference.", show_default=False)],
        out: Annotated[Path, typer.Option("--out", "-o", help="Audit folder to create (audit.json, audit.html, cells/).", show_default=False)],
        attacks: Annotated[str, typer.Option("--attacks", help="Comma-separated attacks (see 'fedaudit reconstruct').")] = "ig,fedleak",
        defenses: Annotated[str, typer.Option("--defenses", help="Comma-separated rows: none, prune:0.5, dp:eps=100:delta=1e-5, quantize:bits=8, soteria:0.5, refiner:critic=FILE; chain with '+'.")] = "none",
        attack_options: Annotated[Optional[list[str]], typer.Option("--attack-options", help="Options of one attack, e.g. 'rgla:inverter=inv.safetensors' or 'fedleak:lr=0.03:tv=0.2' (lr, schedule, iterations and restarts are accepted too); repeatable.")] = None,
        iterations: Annotated[Optional[int], typer.Option("--iterations", "-n", help="Iterations for every attack (default: each attack's own).")] = None,
        restarts: Annotated[Optional[int], typer.Option("--restarts", help="Restarts for every attack (default: each attack's own).")] = None,
        labels: Annotated[Optional[str], typer.Option("--labels", help="Label method for every attack (default: each attack's own).")] = None,
        aux: Annotated[Optional[Path], typer.Option("--aux", help="Auxiliary images for label methods that use them.")] = None,
        dummy: Annotated[bool, typer.Option("--dummy", help="Gaussian dummies as auxiliary inputs (e.g. for hfgi labels).")] = False,
        eval_images: Annotated[Optional[Path], typer.Option("--eval-images", help="Labelled images (.safetensors with 'labels', or files + --eval-labels): accuracy after one step with the defended vs the true update.")] = None,
        eval_labels: Annotated[Optional[str], typer.Option("--eval-labels", help="Labels of --eval-images: '3,1,...' or 'names'.")] = None,
        eval_lr: Annotated[Optional[float], typer.Option("--eval-lr", help="Step size of that one step (default: the update's local lr, else 0.1).")] = None,
        fail_on: FailOnOpt = FailOn.never,
        lpips_net: LpipsNetOpt = LpipsNet.vgg,
        lpips_weights: LpipsWeightsOpt = None,
        seed: SeedOpt = 0,
        device: DeviceOpt = "cpu",
        force: ForceOpt = False,
        quiet: QuietOpt = False,
        allow_custom_arch: AllowCustomArchOpt = False,
        ignore_base_mismatch: IgnoreBaseOpt = False,
    ) -> None:
        """Run every attack against every defended copy of the update; one matrix (JSON + HTML with image grids)."""
        attack_names = [a.strip() for a in attacks.split(",") if a.strip()]
        for a in attack_names:
            ATTACKS.get(a)
        if labels:
            LABEL_METHODS.get(labels)
        rows = parse_defenses(defenses)
        per_attack = parse_attack_options(attack_options or [])
        if iterations is not None and iterations < 1 or restarts is not None and restarts < 1:
            raise InputError("--iterations and --restarts must be >= 1")
        outdir = OutputDir(out, force=force)
        with outdir:
            torch.manual_seed(seed)
            tm = load_threat_model(checkpoint, update, allow_custom_arch=allow_custom_arch, check_base=not ignore_base_mismatch)
            t = load_truth(truth)
            dev = resolve_device(device)
            ev_x = ev_y = None
            if eval_images is not None:
                batch = load_images(eval_images, tm.spec.input_shape)
                ev_x, ev_y = batch.images, parse_labels(eval_labels, batch, tm.spec.num_classes)
            ctx = LabelContext(aux=load_aux(tm, aux, None, dummy, 1000, seed, False), seed=seed, device=dev)
            plan = AuditPlan(rows, attack_names, per_attack, iterations, restarts, labels, ctx, seed, str(dev), lpips_net.value,
                             str(lpips_weights) if lpips_weights else None, ev_x, ev_y, eval_lr, quiet)
            info_line(f"audit: {len(rows)} defense rows x {len(attack_names)} attacks on {tm.spec.arch}, B={tm.batch_size}", quiet)
            doc = new_report("audit", {"checkpoint": checkpoint, "update": update, "truth": truth, "eval_images": eval_images},
                             {"attacks": attack_names, "defenses": [r[0] for r in rows], "iterations": iterations,
                              "restarts": restarts, "labels": labels, "eval_lr": eval_lr}, seed=seed, device=str(dev))
            try:
                result = run_audit(tm, t, plan, outdir, on_cell=lambda c: info_line(
                    f"{c['defense']} x {c['attack']}: PSNR {c['psnr'] if c['psnr'] is None else round(c['psnr'], 2)}, risk {c['risk_band']}", quiet))
            except KeyboardInterrupt:
                result = {"rows": [], "cells": [], "interrupted": True, "worst_risk_band": None}
            doc.update(status="interrupted" if result["interrupted"] else "complete", rows=result["rows"],
                       cells=result["cells"], worst_risk_band=result["worst_risk_band"],
                       plan={"attacks": attack_names, "defenses": [r[0] for r in rows]})
            grids = {}
            for c in result["cells"]:
                if c.get("grid"):
                    grids[c["grid"]] = (outdir.staging / c["grid"]).read_bytes()
            outdir.write_text("audit.json", dumps_json(doc))
            outdir.write_text("audit.html", render_audit_html(doc, grids))
            outdir.commit()
        emit_json({"out": str(out), "status": doc["status"], "worst_risk_band": doc["worst_risk_band"],
                   "cells": [{k: c.get(k) for k in ("defense", "attack", "psnr", "ssim", "risk_band", "label_insacc", "error")}
                             for c in result["cells"]]})
        if result["interrupted"]:
            info_line("interrupted: the cells finished so far were written", quiet)
            raise typer.Exit(EXIT_INTERRUPTED)
        bands = [c["risk_band"] for c in result["cells"] if c.get("risk_band")]
        if bands:
            order = ["low", "medium", "high", "very_high"]
            fail_exit(max(bands, key=order.index), fail_on.value, quiet)
