"""The dashboard's HTML (pure: collected data in, one self-contained page out).

No script and no external resource: the page reloads itself (`<meta http-equiv="refresh">`), the
plots are inline SVG. Every string is escaped and passed through the secret mask.
"""

from __future__ import annotations

import datetime as dt
import html
from typing import Any

from lanes.base.mask import known_secrets, mask
from rig.dashboard import plot
from rig.dashboard.collect import is_unavailable
from rig.inventory.status import age

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.2em;color:#222;background:#fff}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.05em;margin:1.2em 0 .4em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.88em}td,th{padding:.2em .6em;text-align:left;border-bottom:1px solid #eee}
th{background:#f3f3f3}.meta{color:#666;font-size:.85em}.unavailable{color:#8a5a00;background:#fff6e0;
padding:.3em .6em;display:inline-block}.st{font-weight:600;padding:0 .4em;border-radius:3px}
.ok,.ready,.passed,.up,.succeeded{background:#dff5df;color:#165c16}.failing,.failed,.down,.no,.drop{background:#fbe0e0;color:#8b1111}
.running,.queued{background:#e0ecfb;color:#123f80}.retired,.unknown,.pending{background:#eee;color:#555}
.grid{display:flex;flex-wrap:wrap;gap:1.5em}.plot{border:1px solid #eee}
"""


def _t(value: Any) -> str:
    return html.escape(mask("" if value is None else str(value), extra=known_secrets()))


def _st(value: Any) -> str:
    v = "unknown" if value is None else str(value)
    cls = "".join(ch if ch.isalnum() else "-" for ch in v.lower())
    return f'<span class="st {cls}">{_t(v)}</span>'


def _unavailable(section: dict[str, Any]) -> str:
    return f'<p class="unavailable">unavailable: {_t(section["unavailable"])}</p>'


def _ago(seconds: Any) -> str:
    return "-" if seconds is None else f"{age(seconds)} ago"


def _copies(copies: Any) -> str:
    if copies is None:
        return "-"
    if not isinstance(copies, list):
        return _t(copies)
    names = []
    for c in copies:
        if isinstance(c, dict):
            name = c.get("name") or c.get("worktree") or c.get("path") or "?"
            size = c.get("size_gb") or c.get("gb")
            names.append(f"{name} ({size} GB)" if size is not None else str(name))
        else:
            names.append(str(c))
    return f"{len(names)}" + (f": {_t(', '.join(names))}" if names else "")


def lanes_html(section: Any, dagu: Any) -> str:
    out = ['<section id="lanes"><h2>Lanes</h2>']
    if is_unavailable(section):
        out.append(_unavailable(section))
    else:
        out.append("<table><tr><th>lane</th><th>answering</th><th>free disk</th><th>copies</th>"
                   "<th>gates running</th><th>note</th></tr>")
        for r in section:
            answers = "yes" if r.get("answers") else "no"
            name = f"lane {r.get('index')}" + (f" ({r['name']})" if r.get("name") else "")
            free = "-" if r.get("free_gb") is None else f"{r['free_gb']} GB"
            running = r.get("running")
            gates = "-" if running is None else (_t(", ".join(map(str, running))) if running else "none")
            note = r.get("error") or r.get("note") or ""
            out.append(f'<tr class="lane" data-lane="{_t(r.get("index"))}" data-answers="{answers}">'
                       f"<td>{_t(name)}</td><td>{_st(answers)}</td><td>{free}</td><td>{_copies(r.get('copies'))}</td>"
                       f"<td>{gates}</td><td>{_t(note)}</td></tr>")
        out.append("</table>")
    out.append('<h3 id="dagu">Dagu runs in progress</h3>')
    if is_unavailable(dagu):
        out.append(_unavailable(dagu))
    elif not dagu:
        out.append('<p class="meta">none</p>')
    else:
        out.append("<table><tr><th>workflow</th><th>run</th><th>status</th><th>started</th></tr>")
        for r in dagu:
            out.append(f'<tr class="dagu-run" data-workflow="{_t(r.get("name"))}" data-status="{_t(r.get("status"))}">'
                       f'<td>{_t(r.get("name"))}</td><td>{_t(r.get("run_id"))}</td>'
                       f"<td>{_st(r.get('status'))}</td><td>{_t(r.get('started_at'))}</td></tr>")
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def aliases_html(section: Any) -> str:
    out = ['<section id="aliases"><h2>Aliases</h2>']
    if is_unavailable(section):
        return "".join(out) + _unavailable(section) + "</section>"
    out.append("<table><tr><th>alias</th><th>status</th><th>held for</th><th>last answer</th>"
               "<th>in-flight limit</th><th>pool</th><th>last error</th></tr>")
    for r in section["rows"]:
        held = f"since {r['retired']}" if r["status"] == "retired" else (
            "-" if r.get("held_for_s") is None else age(r["held_for_s"]))
        out.append(f'<tr class="alias" data-alias="{_t(r["alias"])}" data-status="{_t(r["status"])}">'
                   f"<td>{_t(r['alias'])}</td><td>{_st(r['status'])}</td><td>{_t(held)}</td>"
                   f"<td>{_ago(r.get('last_answer_ago_s'))}</td><td>{_t(r.get('max_inflight') or '-')}</td>"
                   f"<td>{_t(r.get('pool') or '-')}</td><td>{_t((r.get('last_error') or '')[:120])}</td></tr>")
    out.append("</table>")
    probe = "never probed" if section.get("probe_age_s") is None else f"probed {age(section['probe_age_s'])} ago"
    out.append(f'<p class="meta">snapshot {_t(section.get("snapshot"))}: {probe}; hosts up '
               f'{section.get("hosts_up")}/{section.get("hosts")}</p></section>')
    return "".join(out)


def jobs_html(section: Any) -> str:
    out = ['<section id="jobs"><h2>Jobs</h2>']
    if is_unavailable(section):
        return "".join(out) + _unavailable(section) + "</section>"
    if not section:
        return "".join(out) + '<p class="meta">no job state yet</p></section>'
    out.append("<table><tr><th>job</th><th>status</th><th>stages</th><th>attempts</th><th>last event</th></tr>")
    for j in section:
        stages = " ".join(f"{_t(n)} {_st(s)}" for n, s in j.get("stages", {}).items()) or "-"
        out.append(f'<tr class="job" data-job="{_t(j.get("job"))}"><td>{_t(j.get("job"))}</td>'
                   f"<td>{_st(j.get('status'))}</td><td>{stages}</td><td>{_t(j.get('attempts'))}</td>"
                   f"<td>{_t(j.get('last_event') or j.get('error') or '')}</td></tr>")
    out.append("</table></section>")
    return "".join(out)


def batches_html(section: Any) -> str:
    out = ['<section id="batches"><h2>Batches</h2>']
    if is_unavailable(section):
        return "".join(out) + _unavailable(section) + "</section>"
    pts = section["points"]
    out.append('<div class="grid">')
    out.append(plot.svg("best score (share of cases) per batch, per model", plot.series(pts, "best_share")))
    out.append(plot.svg("compiled share per batch, per model", plot.series(pts, "compiled_share")))
    out.append("</div>")
    out.append(f'<p class="meta">{len(section["lines"])} batches from {_t(section["folder"])}'
               + (f'; {section["unreadable_lines"]} unreadable lines skipped' if section["unreadable_lines"] else "")
               + "</p>")
    recent = list(reversed(pts))[:12]
    if recent:
        out.append("<table><tr><th>batch</th><th>function</th><th>model</th><th>compiled</th><th>best</th></tr>")
        for p in recent:
            best = "-" if p.get("best") is None else f"{p['best']}/{p.get('cases_run') or '-'}"
            out.append(f'<tr class="batch"><td>{_t(p.get("batch"))}</td><td>{_t(p.get("function"))}</td>'
                       f"<td>{_t(p.get('model'))}</td><td>{_t(p.get('compiled'))}/{_t(p.get('candidates'))}</td>"
                       f"<td>{_t(best)}</td></tr>")
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def floors_html(section: Any) -> str:
    out = ['<section id="floors"><h2>Floors</h2>']
    if is_unavailable(section):
        return "".join(out) + _unavailable(section) + "</section>"
    out.append("<table><tr><th>function</th><th>floor</th><th>admitted with</th><th>batch</th></tr>")
    for f in section:
        floor = "none" if f.get("floor_passed") is None else f"{f['floor_passed']}/{f['floor_run']}"
        adm = f"{f.get('admitted_passed')}/{f.get('admitted_run') if f.get('admitted_run') is not None else '-'}"
        out.append(f'<tr class="floor" data-function="{_t(f["function"])}"><td>{_t(f["function"])}</td>'
                   f"<td>{_t(floor)}</td><td>{_t(adm)}</td><td>{_t(f.get('batch'))}</td></tr>")
    out.append("</table></section>")
    return "".join(out)


def render(data: dict[str, Any], refresh_s: int) -> str:
    at = data.get("collected_at")
    when = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if at else "-"
    body = "".join([
        lanes_html(data.get("lanes"), data.get("dagu")),
        aliases_html(data.get("aliases")),
        jobs_html(data.get("jobs")),
        batches_html(data.get("batches")),
        floors_html(data.get("floors")),
    ])
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="refresh" content="{int(refresh_s)}">'
            "<meta name=\"viewport\" content=\"width=device-width\">"
            f"<title>nev rig</title><style>{CSS}</style></head><body>"
            f'<h1>nev rig</h1><p class="meta" id="collected">collected {when} in {data.get("took_s", "-")} s; '
            f"this page reloads every {int(refresh_s)} s</p>{body}</body></html>")
