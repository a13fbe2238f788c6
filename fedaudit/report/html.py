"""A self-contained report.html: every image inlined as a data URI, every string escaped."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Sequence
from html import escape
from typing import Any

from fedaudit.metrics.band import MARGIN_DB
from fedaudit.report.label_lines import summary_line
from fedaudit.report.run_report import LabelReading, Measured, Proxies, RunReport, Verdict
from fedaudit.report.tables import table

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}img.px{image-rendering:pixelated}
.band{font-weight:bold;padding:2px 8px;border-radius:4px;color:#fff}
.low{background:#3a7d44}.medium{background:#c79a00}.high{background:#d9661f}.very_high{background:#b3261e}
pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:12px}
td.h{font-family:monospace;font-size:11px;word-break:break-all;max-width:36em}"""


def _uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _band(band: str) -> str:
    return band.replace("_", " ")


def _num(v: Any) -> str:
    return "n/a" if v is None else (f"{v:.4g}" if isinstance(v, float) else escape(str(v)))


def _estimated(verdict: Verdict, measured: str | None) -> str:
    """The truth-free band, beside the measured one when the truth was given (docs/methods/verdict.md)."""
    e = escape
    if not verdict.band:
        return f"<h2>Estimated leakage risk: none</h2><p>{e(str(verdict.why))}</p>"
    band = verdict.band
    side = (f" &middot; measured against the truth: <span class='band {e(measured)}'>{e(_band(measured))}</span>"
            f" (<code>--fail-on</code> uses the measured range)" if measured else
            " (no truth given: <code>--fail-on</code> uses this estimated range)")
    return (f"<h2>Estimated leakage risk (no truth needed): <span class='band {e(band)}'>{e(_band(band))}</span>, range"
            f"{_range(verdict.range)}{side}</h2>"
            f"<p>Confidence {_num(verdict.confidence)} that the true band is this one; probability it is higher "
            f"{_num(verdict.p_higher)}. Source: {e(str(verdict.source))}"
            + (f"; rule score {_num(verdict.score_db)} dB" if verdict.score_db is not None else "")
            + (f": {e(str(verdict.why))}" if verdict.why else "") + ".</p>"
            + "".join(f"<p class='band medium'>caveat: {e(c)}</p>" for c in verdict.caveats))


def _range(band_range: Sequence[str] | None) -> str:
    if not band_range:
        return ""
    lo, hi = band_range
    return (f" <span class='band {escape(lo)}'>{escape(_band(lo))}</span> .. "
            f"<span class='band {escape(hi)}'>{escape(_band(hi))}</span>")


def _headline(report: RunReport) -> str:
    """The one verdict a reviewer reads first: the band, its range, where it comes from and how to read it."""
    e = escape
    gate = report.fail_on_band
    if gate is None or not gate.point:
        return ""
    source = ("measured against the truth" if gate.source_kind == "measured" else
              f"estimated without the truth ({report.verdict.source if report.verdict else None})")
    return (f"<h2>Leakage risk: <span class='band {e(gate.point)}'>{e(_band(gate.point))}</span>, range"
            f"{_range(gate.range)} &middot; {e(source)}</h2>"
            "<p>How to read it: the first band is what the evidence supports; the range is how sure that is (the "
            "lower end is established, the upper end is what cannot be ruled out). A narrow range is a firm verdict, a "
            f"wide one says measure more (more images, proxies or restarts). {e(gate.line or '')}.</p>")


def _proxies(proxies: Proxies | None, pngs: list[bytes]) -> str:
    """The proxy batches the estimate was calibrated on: what each measured, and its truth-above-result grid."""
    e = escape
    if proxies is None or (not proxies.measured and not proxies.not_applicable):
        return ""
    rows = proxies.measured
    parts = ["<h2>Proxy batches</h2>"]
    if proxies.not_applicable:
        parts.append(f"<p>Uncalibrated: {e(str(proxies.not_applicable))}; the estimate is the frozen rule's.</p>")
    if rows:
        recipe = proxies.recipe or {}
        parts.append(f"<p>The same attack on {len(rows)} batches of public images ({e(str(proxies.source))}), "
                     f"captured through the same checkpoint with this update's recipe ({e(str(recipe.get('kind')))}, "
                     f"B = {e(str(recipe.get('batch_size')))}, K = {e(str(recipe.get('local_steps')))}, defenses: "
                     f"{e(', '.join(recipe.get('defenses') or []) or 'none')}) and measured against their own images."
                     "</p><table><tr><th>proxy</th><th class='l'>measured</th><th class='l'>range</th><th>PSNR</th>"
                     "<th>vs blank floor</th><th>identified</th><th>rule score (dB)</th><th class='l'>images</th></tr>")
        for i, row in enumerate(rows):
            img = f"<img class='px' src='{_uri(pngs[i])}'>" if i < len(pngs) else ""
            m = row["measured"]
            parts.append(f"<tr><td>{row['index']}</td><td class='l'><span class='band {e(m['band'])}'>{e(_band(m['band']))}"
                         f"</span></td><td class='l'>{_range(m['range'])}</td><td>{_num(row.get('psnr'))}</td>"
                         f"<td>{_num(row.get('above_floor'))}</td><td>{_num(row.get('identified'))} of "
                         f"{_num(row.get('of'))}</td><td>{_num(row.get('score_db'))}</td><td class='l'>{img}</td></tr>")
        parts.append("</table>")
    parts += [f"<p class='band medium'>warning: {e(w)}</p>" for w in proxies.warnings]
    return "".join(parts)


def _yes_no(v: Any) -> str:
    return "n/a" if v is None else ("yes" if v else "no")


def _labels_summary(labels: LabelReading) -> str:
    """Where the attack's labels came from, the self-check's finding and the label warnings, before the raw JSON."""
    e = escape
    method = labels.method or labels.source
    chosen = (labels.diagnostics or {}).get("chosen")
    parts = [f"<p>From {e(str(method))}" + (f" (chose {e(str(chosen))})" if chosen else "") + "."]
    metrics = labels.metrics or {}
    if "InsAcc" in metrics:
        parts.append(f" Against the truth: InsAcc {_num(metrics['InsAcc'])}, an even guess "
                     f"{_num((metrics.get('floor') or {}).get('InsAcc'))}.")
    parts.append("</p>")
    line = summary_line(labels.self_check(), reason=False)
    if line:
        parts.append(f"<p>{e(line)}</p>")
    parts += [f"<p class='band medium'>warning: {e(w)}</p>" for w in labels.warnings]
    return "".join(parts)


def _measured(m: Measured) -> list[str]:
    """The measured band, the metrics' table, identification, the blank floor and FedLeak's best-match figures."""
    e = escape
    band = m.risk_band or ""
    conventions = m.conventions or {}
    narrow = m.band.narrow if m.band else None
    parts = [f"<h2>Measured leakage risk: <span class='band {e(band)}'>{e(_band(band))}</span>, range"
             f"{_range(m.risk_band_range)}</h2><p>{e(str(m.band.why if m.band else ''))}.</p>"
             + (f"<p><b>What would narrow this range:</b> {e(narrow)}.</p>" if narrow else "")
             + f"<p>{e(conventions.get('risk_bands', ''))}; worst single image: "
             f"{e(_band(m.worst_image_risk_band or ''))}</p>",
             "<table><tr><th class='l'>metric</th><th>mean</th><th>std</th><th>min</th><th>max</th></tr>"]
    for name, st in (m.summary.items() if m.summary else []):
        if st is None:
            reason = (conventions.get("lpips") or {}).get("unavailable_reason") if name == "lpips" else ""
            parts.append(f"<tr><td class='l'>{e(name)}</td><td colspan=4 class='l'>null: {e(str(reason))}</td></tr>")
        else:
            parts.append(f"<tr><td class='l'>{e(name)}</td>"
                         + "".join(f"<td>{_num(v)}</td>" for v in (st.mean, st.std, st.min, st.max)) + "</tr>")
    parts.append("</table>")
    ident = m.identification
    if ident is not None and ident.rate is not None:
        parts.append(f"<p>Identification: {ident.identified} of {ident.of} reconstructions are nearest (LPIPS-"
                     f"{e(str(ident.net))}) to their own original among {ident.candidates} candidates (chance "
                     f"{ident.chance:.3f}): band {e(_band(ident.band or ''))}; PSNR band "
                     f"{e(_band(m.risk_band_psnr or ''))}.</p>")
    elif ident is not None:
        parts.append(f"<p>Identification: not computed ({e(str(ident.reason))}).</p>")
    blank = m.blank_baseline
    if blank and m.psnr_above_blank is not None:
        above = m.psnr_above_blank
        nulls = blank.get("nulls") or {}
        listed = ", ".join(f"{name.replace('_', ' ')} {_num(v)}" for name, v in nulls.items())
        parts.append(f"<p>Floor: the strongest reconstruction that shows nothing of an image scores PSNR "
                     f"{_num(blank.get('null_floor_psnr', blank['floor']['psnr']))} on average against these images "
                     f"(each image's best null reference; mean PSNR of each: {e(listed or 'n/a')}; an "
                     f"all-{e(blank['floor']['image'])} image alone: {_num(blank['floor']['psnr'])}, SSIM "
                     f"{_num(blank['floor']['ssim'])}). The reconstructions are "
                     f"{'above it' if above >= MARGIN_DB else 'not above it'} ({above:+.2f} dB from their floors on "
                     f"average; PSNR counts only {MARGIN_DB:g} dB above it).</p>")
    best = m.paper_best_match
    if best and best.get("psnr"):
        parts.append(f"<p>For comparison with FedLeak's tables ({e(conventions.get('paper_best_match', ''))}): "
                     f"PSNR {_num(best['psnr']['mean'])}, SSIM {_num(best['ssim']['mean'])}, "
                     f"{best['distinct_reconstructions']} distinct reconstructions used.</p>")
    return parts


def _per_image(m: Measured, image_pngs: list[bytes]) -> str:
    e = escape
    parts = ["<h2>Per image</h2><table><tr><th>truth</th><th>recon</th><th>image</th><th>PSNR</th>"
             "<th>vs blank</th><th>SSIM</th><th>LPIPS</th><th>identified</th><th>firm</th><th>possible</th>"
             "<th>rank</th><th>LPIPS margin</th><th class='l'>band</th></tr>"]
    for row in m.per_image or []:
        r = row["recon_index"]
        img = f"<img class='px' width=64 src='{_uri(image_pngs[r])}'>" if r < len(image_pngs) else ""
        parts.append(f"<tr><td>{row['truth_index']}</td><td>{r}</td><td>{img}</td><td>{_num(row['psnr'])}</td>"
                     f"<td>{_num(row.get('above_floor'))}</td><td>{_num(row['ssim'])}</td><td>{_num(row['lpips'])}</td>"
                     f"<td>{_yes_no(row.get('identified'))}</td><td>{_yes_no(row.get('firm'))}</td>"
                     f"<td>{_yes_no(row.get('possible'))}</td><td>{_num(row.get('identification_rank'))}</td>"
                     f"<td>{_num(row.get('identification_margin'))}</td>"
                     f"<td class='l'>{e(_band(row['risk_band']))}</td></tr>")
    return "".join(parts) + "</table>"


def render_html(report: RunReport, grid_png: bytes | None, image_pngs: list[bytes],
                proxy_pngs: list[bytes] | None = None) -> str:
    e = escape
    title = f"fedaudit {report.command} report"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{_CSS}</style>"
             f"</head><body><h1>{e(title)}</h1>"]
    parts.append(f"<p>status: <b>{e(str(report.status))}</b> &middot; created {e(str(report.created_at))}"
                 f" &middot; fedaudit {e(str(report.tool.get('version')))}</p>")
    parts.append(_headline(report))
    m, attack = report.metrics, report.attack
    image_metrics = m is not None and m.per_image is not None
    for warning in attack.warnings if attack else []:
        parts.append(f"<p class='band medium'>warning: {e(warning)}</p>")
    if report.verdict is not None:
        parts.append(_estimated(report.verdict, m.risk_band if m is not None and image_metrics else None))
    if m is not None and image_metrics:
        parts += _measured(m)
    if grid_png:
        parts.append(f"<h2>Images</h2><p>{'Top: ground truth; below: matched reconstruction.' if image_metrics else 'Reconstructions.'}</p>"
                     f"<img class='px' alt='grid' src='{_uri(grid_png)}'>")
    recovered = attack.recovered if attack else None
    if recovered:
        if recovered.get("images_note"):
            parts.append(f"<p><b>{e(recovered['images_note'])}</b></p>")
        parts.append("<h2>Recovered beyond images</h2><p>Per-sample logits, confidences and output-layer inputs are "
                     "leakage in themselves (features in reconstruction.safetensors).</p>"
                     + table({k: v for k, v in recovered.items() if k != 'logits'}))
    if attack and attack.details:
        parts.append("<h2>Attack details</h2>" + table(attack.details))
    if m is not None and m.features is not None:
        features = {k: v for k, v in m.features.items() if k != "pairs"}
        parts.append("<h2>Feature recovery (vs truth)</h2>" + table(features))
    if m is not None and image_metrics:
        parts.append(_per_image(m, image_pngs))
    if report.evidence is not None:
        parts.append(_proxies(report.evidence.proxies, proxy_pngs or []))
        shown = {k: v for k, v in dataclasses.asdict(report.evidence).items() if k not in ("verdict", "proxies")}
        parts.append("<h2>Truth-free evidence</h2>" + table(shown))
    if report.labels is not None:
        parts.append("<h2>Labels</h2>" + _labels_summary(report.labels) + table(dataclasses.asdict(report.labels)))
    parts.append("<h2>Inputs</h2><table><tr><th class='l'>role</th><th class='l'>path</th><th class='l'>sha256</th></tr>")
    for role, inp in report.inputs.items():
        parts.append(f"<tr><td class='l'>{e(role)}</td><td class='l'>{e(str(inp['path']))}</td><td class='h'>{e(str(inp['sha256']))}</td></tr>")
    parts.append("</table>")
    settings = {"options": report.options, "seed": report.seed, "environment": report.environment,
                "timings": report.timings}
    parts.append("<h2>Options, environment, timings</h2>" + table(settings))
    parts.append("</body></html>\n")
    return "".join(parts)
