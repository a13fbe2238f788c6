"""A scan as one self-contained HTML page: the verdict, then each finding with its tensor, statistic, value, the
benign range and what the attack it indicates recovers."""

from __future__ import annotations

from html import escape as e
from typing import Any

from fedaudit.report.html import _CSS

_COLOUR = {"high": "very_high", "medium": "medium", "info": "low", "none": "low"}


def render_scan_html(doc: dict[str, Any]) -> str:
    sev = doc["severity"]
    head = ("built to leak: a published malicious construction's structure was found" if doc["built_to_leak"] else
            "no construction found" if sev in ("none", "info") else "outside the benign range, no construction matched")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fedaudit scan</title><style>{_CSS}</style>"
             f"</head><body><h1>fedaudit scan</h1><p>checkpoint <code>{e(doc['checkpoint']['path'])}</code> "
             f"(declared: {e(str(doc['declared']))}, {e(doc['kind'])})</p>"
             f"<p>severity: <span class='band {_COLOUR[sev]}'>{e(sev)}</span> &middot; {e(head)}</p>"]
    if doc["findings"]:
        parts.append("<table><tr><th class='l'>severity</th><th class='l'>check</th><th class='l'>tensor</th>"
                     "<th class='l'>statistic</th><th>value</th><th class='l'>benign</th><th class='l'>indicates</th>"
                     "<th class='l'>recovers</th><th class='l'>detail</th></tr>")
        for f in doc["findings"]:
            v = f["value"]
            parts.append(f"<tr><td><span class='band {_COLOUR[f['severity']]}'>{e(f['severity'])}</span></td>"
                         f"<td>{e(f['check'])}</td><td><code>{e(f['tensor'])}</code></td><td>{e(f['statistic'])}</td>"
                         f"<td>{e(f'{v:.4g}' if isinstance(v, float) else str(v))}</td><td>{e(f['benign'])}</td>"
                         f"<td>{e(f['indicates'])}</td><td>{e(f['recovers'])}</td><td>{e(f['detail'])}</td></tr>")
        parts.append("</table>")
    parts.append(f"<p>checks run: {e(', '.join(doc['checks']))}; model built: {doc['model_built']}; probe: "
                 f"{e(str(doc['probe']))}</p>")
    parts += [f"<p class='note'>{e(n)}</p>" for n in doc["notes"]]
    return "\n".join(parts) + "</body></html>\n"
