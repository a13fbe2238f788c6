"""report.html of a text run: the band(s) first, then each true sequence beside the recovered one matched to it, the
words that differ marked (difflib's word alignment), or the recovered sequences alone without the truth. Every string
is escaped; the page is self-contained."""

from __future__ import annotations

import difflib
import json
from html import escape

from fedaudit.report.html import _CSS, _band, _num, _range
from fedaudit.report.text_report import TextReport

_TEXT_CSS = "mark{background:#ffd27f}mark.miss{background:#f4b6b2;text-decoration:line-through}td.t{text-align:left;font-family:monospace;white-space:pre-wrap}"


def marked_pair(true: str, recovered: str | None) -> tuple[str, str]:
    """The two texts as HTML, the words each has that the other lacks marked (missing from the recovery: struck on
    the true side; wrong or extra in the recovery: highlighted)."""
    if recovered is None:
        return f"<mark class='miss'>{escape(true)}</mark>", "<em>(none matched)</em>"
    a, b = true.split(" "), recovered.split(" ")
    left, right = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            left.append(escape(" ".join(a[i1:i2])))
            right.append(escape(" ".join(b[j1:j2])))
            continue
        if i2 > i1:
            left.append(f"<mark class='miss'>{escape(' '.join(a[i1:i2]))}</mark>")
        if j2 > j1:
            right.append(f"<mark>{escape(' '.join(b[j1:j2]))}</mark>")
    return " ".join(left), " ".join(right)


def _headline(report: TextReport) -> str:
    m, v, fail = report.measured, report.verdict, report.fail_on_band
    parts = []
    if m is not None:
        parts.append(f"<h2>Measured leakage risk: <span class='band {escape(m.band)}'>{escape(_band(m.band))}</span>, "
                     f"range{_range(m.band_range)}</h2><p>{escape(m.why)}.</p>")
    if v is not None:
        parts.append(f"<h2>Estimated leakage risk (no truth needed): <span class='band {escape(v.band)}'>"
                     f"{escape(_band(v.band))}</span>, range{_range(v.range)}</h2><p>Source: {escape(v.source)}: "
                     f"{escape(v.why)}.</p>")
        if v.reveals:
            parts.append("<h3>What this update reveals</h3><ul>" + "".join(f"<li>{escape(x)}</li>" for x in v.reveals)
                         + "</ul>")
    if fail is not None and fail.line:
        parts.append(f"<p><strong>{escape(fail.line)}</strong></p>")
    return "".join(parts)


def _pairs(report: TextReport) -> str:
    m = report.measured
    if m is None:
        rows = "".join(f"<tr><td>{s.index}</td><td class='t'>{escape(s.text)}</td><td>{'yes' if s.certified else 'no'}"
                       f"</td><td>{_num(s.score)}</td></tr>" for s in report.sequences)
        return ("<h2>Recovered sequences</h2><table><tr><th>#</th><th class='l'>text</th><th>certified</th>"
                f"<th>span distance</th></tr>{rows}</table>")
    cells: list[str] = []
    for p in m.pairs:
        left, right = marked_pair(p.true_text, p.recovered_text)
        cells.append(f"<tr><td>{p.true_index}</td><td class='t'>{left}</td><td class='t'>{right}</td>"
                    f"<td>{_num(p.token_accuracy)}</td><td>{_num(p.rouge1)}</td><td>{'yes' if p.exact else 'no'}</td></tr>")
    return (f"<h2>Original and recovered, side by side</h2><p>Token accuracy {_num(m.token_accuracy)}, ROUGE-1 "
            f"{_num(m.rouge1)}, ROUGE-2 {_num(m.rouge2)}, ROUGE-L {_num(m.rougeL)}, {m.exact} of {m.of} sequences "
            "exact. Struck: words of the original the recovery misses; highlighted: words of the recovery the "
            "original lacks.</p><table><tr><th>#</th><th class='l'>original (client)</th><th class='l'>recovered</th>"
            f"<th>token acc.</th><th>ROUGE-1</th><th>exact</th></tr>{''.join(cells)}</table>")


def render_text_html(report: TextReport) -> str:
    model, update = report.model, report.update
    title = f"fedaudit {report.attack} report"
    head = (f"<p>{escape(str(model.get('model_type')))} ({escape(str(model.get('kind')))}, width {_num(model.get('width'))}, "
            f"{_num(model.get('layers'))} layers) &middot; update: {escape(str(update.get('kind')))}, "
            f"B = {_num(update.get('batch_size'))}, K = {_num(update.get('local_steps'))}</p>")
    warnings = "".join(f"<p class='band medium'>warning: {escape(w)}</p>" for w in report.warnings
                       + ([report.truth_mismatch] if report.truth_mismatch else []))
    diag = f"<h2>Diagnostics</h2><pre>{escape(json.dumps(report.diagnostics, indent=1))}</pre>"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{_CSS}{_TEXT_CSS}</style></head><body><h1>{escape(title)}</h1>{head}{warnings}"
            f"{_headline(report)}{_pairs(report)}{diag}</body></html>")
