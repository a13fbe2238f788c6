"""The audit matrix as one self-contained HTML page: defenses (rows) x attacks (columns), each cell with its
metrics, risk band and image grid (truth above reconstruction), plus each defense's utility cost."""

from __future__ import annotations

from html import escape as e

from fedaudit.report.audit_record import AuditRecord
from fedaudit.report.html import _CSS, _band, _num, _uri
from fedaudit.report.label_lines import self_check_html
from fedaudit.report.tables import table


def render_audit_html(audit: AuditRecord, grids: dict[str, bytes]) -> str:
    attacks = audit.plan["attacks"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fedaudit audit</title><style>{_CSS}"
             " td.cell{vertical-align:top;text-align:left} td.cell img{max-width:260px}</style></head><body>"
             "<h1>fedaudit audit</h1>"]
    band = audit.worst_risk_band
    parts.append(f"<p>status: <b>{e(audit.status)}</b> &middot; worst cell: <span class='band {e(str(band))}'>"
                 f"{e(_band(band or ''))}</span> &middot; created {e(str(audit.created_at))}</p>")
    parts.append("<table><tr><th class='l'>defense</th><th class='l'>utility cost</th>"
                 + "".join(f"<th class='l'>{e(a)}</th>" for a in attacks) + "</tr>")
    cells = {(c.defense, c.attack): c for c in audit.cells}
    for row in audit.rows:
        util = ("error: " + e(row.error)) if row.error is not None else "<br>".join(
            f"{e(k)}: {_num(v)}" for k, v in (row.utility or {}).items())
        parts.append(f"<tr><td class='l'><b>{e(row.defense)}</b></td><td class='l'>{util}</td>")
        for a in attacks:
            c = cells.get((row.defense, a))
            if c is None:
                parts.append("<td>-</td>")
            elif c.error is not None:
                parts.append(f"<td class='cell'>{e(c.error)}</td>")
            else:
                img = f"<br><img class='px' src='{_uri(grids[c.grid])}'>" if c.grid in grids else ""
                feat = (f"<br>features recovered, max relative error {_num(c.feature_relative_error)}"
                        if c.feature_relative_error is not None else "")
                if not c.grid:
                    feat += "<br>no images: the attack stopped before them (see the cell report)"
                cell_band = c.risk_band
                parts.append(f"<td class='cell'><span class='band {e(str(cell_band))}'>{e(_band(cell_band or ''))}</span><br>"
                             f"estimated without truth: {e(_band(c.risk_band_estimated or 'none'))}"
                             f" (confidence {_num(c.risk_band_estimated_confidence)})<br>"
                             f"PSNR {_num(c.psnr)} &middot; SSIM {_num(c.ssim)} &middot; LPIPS {_num(c.lpips)}<br>"
                             f"labels InsAcc {_num(c.label_insacc)} ({e(str(c.label_method))})"
                             + (f", an even guess {_num(c.label_insacc_floor)}" if c.label_insacc_floor is not None
                                else "") + self_check_html(c.label_self_check) + f"{feat}"
                             f"<br><a href='{e((c.report or '').replace('.json', '.html'))}'>cell report</a>{img}</td>")
        parts.append("</tr>")
    parts.append("</table>")
    parts.append("<h2>Plan and inputs</h2>" + table({"plan": audit.plan, "inputs": audit.inputs, "timings": audit.timings}))
    parts.append("</body></html>\n")
    return "".join(parts)
