"""A round audit as one self-contained HTML page: the band histogram, one row per client, and the image grids of
the worst clients inlined (each client's own report.html is linked)."""

from __future__ import annotations

from html import escape as e
from pathlib import Path

from fedaudit.metrics.risk import BANDS
from fedaudit.report.html import _CSS, _band, _num, _uri
from fedaudit.report.label_lines import self_check_html
from fedaudit.report.round_record import RoundRecord

WORST_SHOWN = 4


def render_round_html(doc: RoundRecord, out: Path) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fedaudit round audit</title><style>{_CSS}"
             " img.grid{max-width:520px}</style></head><body><h1>fedaudit round audit</h1>"]
    band = doc.worst_band
    parts.append(f"<p>status: <b>{e(doc.status)}</b> &middot; {doc.audited} clients audited, {len(doc.errors)} "
                 f"errors &middot; worst client: <b>{e(str(doc.worst_client))}</b> "
                 f"<span class='band {e(str(band))}'>{e(_band(band or 'none'))}</span> &middot; bands are "
                 f"{e(doc.band_source)}</p>")
    parts.append("<table><tr>" + "".join(f"<th>{e(_band(b))}</th>" for b in BANDS) + "</tr><tr>"
                 + "".join(f"<td>{doc.histogram[b]}</td>" for b in BANDS) + "</tr></table>")
    parts.append("<table><tr><th class='l'>client</th><th class='l'>band</th><th class='l'>labels</th>"
                 "<th class='l'>per attack (band, confidence)</th><th>seconds</th></tr>")
    for r in doc.clients:
        if r.status != "ok":
            parts.append(f"<tr><td class='l'>{e(r.client)}</td><td class='l' colspan=3>error (exit {r.exit}): "
                         f"{e(str(r.error))}</td><td>{_num(r.seconds)}</td></tr>")
            continue
        attacks = "<br>".join(
            f"<a href='clients/{e(r.client)}/{e(str(a.report))}'>{e(a.attack)}</a>: {e(_band(a.band or 'none'))} "
            f"({_num(a.confidence)})" for a in r.attacks)
        b = r.band or ""
        parts.append(f"<tr><td class='l'>{e(r.client)}</td><td class='l'><span class='band {e(b)}'>{e(_band(b or 'none'))}"
                     f"</span></td><td class='l'>{e(str(r.labels))} ({e(str(r.label_method))})"
                     f"{self_check_html(r.label_self_check)}</td>"
                     f"<td class='l'>{attacks}</td><td>{_num(r.seconds)}</td></tr>")
    parts.append("</table>")
    ranked = sorted((r for r in doc.clients if r.status == "ok" and r.band),
                    key=lambda r: -BANDS.index(r.band or "low"))[:WORST_SHOWN]
    if ranked:
        parts.append("<h2>The worst clients</h2>")
    for r in ranked:
        for a in r.attacks:
            grid = out / "clients" / r.client / a.grid if a.grid else None
            if grid is not None and grid.is_file():
                parts.append(f"<p><b>{e(r.client)}</b>, {e(a.attack)}: {e(_band(a.band or 'none'))}</p>"
                             f"<img class='px grid' src='{_uri(grid.read_bytes())}'>")
    parts.append("</body></html>\n")
    return "".join(parts)
