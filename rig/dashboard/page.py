"""The dashboard's HTML (pure: collected data in, one self-contained page out).

No script and no external resource: the page reloads itself (`<meta http-equiv="refresh">`), the
plots are inline SVG. Every string is escaped and passed through the secret mask.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from lanes.base.mask import known_secrets, mask
from rig.dashboard import plot
from rig.dashboard import sections as sec
from rig.inventory.status import age

if TYPE_CHECKING:
    from lanes.base.inventory_record import RowJson
    from rig.queues import Figures, QueueSummary
    from rig.serving.state import ReplicaState

S = TypeVar("S")

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.2em;color:#222;background:#fff}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.05em;margin:1.2em 0 .4em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.88em}td,th{padding:.2em .6em;text-align:left;border-bottom:1px solid #eee}
th{background:#f3f3f3}.meta{color:#666;font-size:.85em}.unavailable{color:#8a5a00;background:#fff6e0;
padding:.3em .6em;display:inline-block}.st{font-weight:600;padding:0 .4em;border-radius:3px}
.ok,.ready,.passed,.up,.succeeded{background:#dff5df;color:#165c16}.failing,.failed,.down,.no,.drop{background:#fbe0e0;color:#8b1111}
.running,.queued{background:#e0ecfb;color:#123f80}.drained,.stopped{background:#fff1d6;color:#7a4b00}.retired,.unknown,.pending{background:#eee;color:#555}
.grid{display:flex;flex-wrap:wrap;gap:1.5em}.plot{border:1px solid #eee}
"""


def _t(value: object) -> str:
    return html.escape(mask("" if value is None else str(value), extra=known_secrets()))


def _st(value: object) -> str:
    v = "unknown" if value is None else str(value)
    cls = "".join(ch if ch.isalnum() else "-" for ch in v.lower())
    return f'<span class="st {cls}">{_t(v)}</span>'


def _unavailable(reason: str | None) -> str:
    return f'<p class="unavailable">unavailable: {_t(reason)}</p>'


def _ago(seconds: float | None) -> str:
    return "-" if seconds is None else f"{age(seconds)} ago"


def _copies(copies: object) -> str:
    if copies is None:
        return "-"
    if not isinstance(copies, list):
        return _t(copies)
    names = []
    for c in copies:
        if isinstance(c, dict):
            name = c.get("name") or c.get("worktree") or c.get("path") or "?"
            size = c.get("size_gb") or c.get("gb")
            names.append(f"{name} ({size} GiB)" if size is not None else str(name))
        else:
            names.append(str(c))
    return f"{len(names)}" + (f": {_t(', '.join(names))}" if names else "")


def _section(sid: str, title: str, inner: str) -> str:
    return f'<section id="{sid}"><h2>{title}</h2>{inner}</section>'


def _shown(source: S | sec.Missing | None, body: Callable[[S], str]) -> str:
    """What a source's data shows, or why the source is unavailable."""
    if isinstance(source, sec.Missing):
        return _unavailable(source.reason)
    if source is None:       # not collected: shown as a missing source
        return _unavailable("not collected")
    return body(source)


def _table(heads: Iterable[str], rows: Iterable[str]) -> str:
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr>" + "".join(rows) + "</table>"


def lanes_html(section: list[sec.LaneRow] | sec.Missing | None, dagu: list[sec.DaguRun] | sec.Missing | None) -> str:
    return _section("lanes", "Lanes", _shown(section, _lanes_table)
                    + '<h3 id="dagu">Dagu runs in progress</h3>' + _shown(dagu, _dagu_table))


def _lanes_table(section: list[sec.LaneRow]) -> str:
    return _table(("lane", "answering", "free disk", "copies", "gates running", "note"), map(_lane_row, section))


def _lane_row(r: sec.LaneRow) -> str:
    answers = "yes" if r.answers else "no"
    name = f"lane {r.index}" + (f" ({r.name})" if r.name else "")
    free = "-" if r.free_gb is None else f"{r.doc['free_gb']} GiB"
    gates = "-" if r.running is None else (_t(", ".join(r.running)) if r.running else "none")
    return (f'<tr class="lane" data-lane="{_t(r.index)}" data-answers="{answers}">'
            f"<td>{_t(name)}</td><td>{_st(answers)}</td><td>{free}</td><td>{_copies(r.copies)}</td>"
            f"<td>{gates}</td><td>{_t(r.note)}</td></tr>")


def _dagu_table(runs: list[sec.DaguRun]) -> str:
    if not runs:
        return '<p class="meta">none</p>'
    return _table(("workflow", "run", "status", "started"), (
        f'<tr class="dagu-run" data-workflow="{_t(r.name)}" data-status="{_t(r.status)}">'
        f'<td>{_t(r.name)}</td><td>{_t(r.run_id)}</td>'
        f"<td>{_st(r.status)}</td><td>{_t(r.started_at)}</td></tr>" for r in runs))


def aliases_html(section: sec.AliasesSection | sec.Missing | None) -> str:
    return _section("aliases", "Aliases", _shown(section, _aliases_table))


def _aliases_table(section: sec.AliasesSection) -> str:
    probe = "never probed" if section.probe_age_s is None else f"probed {age(section.probe_age_s)} ago"
    return (_table(("alias", "status", "held for", "last answer", "in-flight limit", "pool", "last error"),
                   map(_alias_row, section.rows))
            + f'<p class="meta">snapshot {_t(section.snapshot)}: {probe}; hosts up '
            f'{section.hosts_up}/{section.hosts}</p>')


def _alias_row(r: RowJson) -> str:
    held = f"since {r['retired']}" if r["status"] == "retired" else (
        "-" if r.get("held_for_s") is None else age(r["held_for_s"]))
    return (f'<tr class="alias" data-alias="{_t(r["alias"])}" data-status="{_t(r["status"])}">'
            f"<td>{_t(r['alias'])}</td><td>{_st(r['status'])}</td><td>{_t(held)}</td>"
            f"<td>{_ago(r.get('last_answer_ago_s'))}</td><td>{_t(r.get('max_inflight') or '-')}</td>"
            f"<td>{_t(r.get('pool') or '-')}</td><td>{_t((r.get('last_error') or '')[:120])}</td></tr>")


def replicas_html(section: list[ReplicaState] | sec.Missing | None) -> str:
    if section is None:           # not collected (a page from before the serving section)
        return ""
    return _section("replicas", "Serving replicas", _shown(section, _replicas_table))


def _replicas_table(section: list[ReplicaState]) -> str:
    return _table(("replica", "server", "aliases", "state", "last action"), (
        f'<tr class="replica" data-replica="{_t(r.replica)}" data-state="{_t(r.state)}">'
        f"<td>{_t(r.replica)}</td><td>{_t(r.server)}</td><td>{_t(', '.join(r.aliases))}</td>"
        f"<td>{_st(r.state)}</td><td>{_t(r.by or '-')}</td></tr>" for r in section))


def jobs_html(section: list[sec.JobRow] | sec.Missing | None,
              on_lanes: list[sec.LaneJobRow] | sec.Missing | None = None) -> str:
    lanes = "" if on_lanes is None else \
        f"<h3>In flight on the lanes</h3>{_shown(on_lanes, _lane_jobs_table)}"
    return _section("jobs", "Jobs", _shown(section, _jobs_table) + lanes)


def _lane_jobs_table(section: list[sec.LaneJobRow]) -> str:
    if not section:
        return '<p class="meta">no job in flight</p>'
    return _table(("job", "lane", "status", "stage", "running for", "stages"),
                  map(_lane_job_row, section))


def _lane_job_row(j: sec.LaneJobRow) -> str:
    head = f'<tr class="lane-job" data-lane-job="{_t(j.job)}"'
    s = j.summary
    if s is None:
        return (f'{head}><td>{_t(j.job)}</td><td>{_t(j.lane or "")}</td>'
                f'<td colspan="4">{_unavailable(j.unavailable)}</td></tr>')
    stages = " ".join(f"{_t(n)} {_st(st)}" for n, st in s.stages.items()) or "-"
    status = s.status if s.this_run else f"{s.status} (an earlier run)"
    secs = s.stage_age_s
    return (f'{head} data-stage="{_t(s.stage or "")}">'
            f'<td>{_t(j.job)}</td><td>{_t(s.lane)}</td>'
            f"<td>{_st(status)}</td><td>{_t(s.stage or '-')}</td>"
            f"<td>{_t(age(secs)) if secs is not None else '-'}</td><td>{stages}</td></tr>")


def _jobs_table(section: list[sec.JobRow]) -> str:
    if not section:
        return '<p class="meta">no job has run here yet</p>'
    return _table(("job", "status", "stages", "attempts", "last event"), map(_job_row, section))


def _job_row(j: sec.JobRow) -> str:
    stages = " ".join(f"{_t(n)} {_st(s)}" for n, s in j.stages.items()) or "-"
    return (f'<tr class="job" data-job="{_t(j.job)}"><td>{_t(j.job)}</td>'
            f"<td>{_st(j.status)}</td><td>{stages}</td><td>{_t(j.attempts)}</td>"
            f"<td>{_t(j.last_event or j.error or '')}</td></tr>")


def batches_html(section: sec.BatchesSection | sec.Missing | None) -> str:
    return _section("batches", "Batches", _shown(section, _batches_plots_and_table))


def _batches_plots_and_table(section: sec.BatchesSection) -> str:
    pts = section.points
    out = ['<div class="grid">',
           plot.svg("best score (share of cases) per batch, per model", plot.series((p.model, p.time, p.best_share) for p in pts)),
           plot.svg("compiled share per batch, per model", plot.series((p.model, p.time, p.compiled_share) for p in pts)),
           "</div>",
           f'<p class="meta">{len(section.lines)} batches from {_t(section.folder)}'
           + (f"; {section.unreadable_lines} unreadable lines skipped" if section.unreadable_lines else "")
           + "</p>"]
    recent = list(reversed(pts))[:12]
    if recent:
        out.append(_table(("batch", "function", "model", "compiled", "best"), map(_batch_row, recent)))
    spends = section.spend
    if spends:
        out.append(_table(("job or worktree", "tokens", "of budget", "GPU-s", "of budget", "budget"),
                          (_spend_row(name, s) for name, s in sorted(spends.items()))))
    return "".join(out)


def _spend_row(name: str, s: sec.Spend) -> str:
    def lim(x: object) -> str:
        return "-" if x is None else _t(x)

    return (f'<tr class="spend" data-job="{_t(name)}" data-bound="{_t(s.bound or "")}"><td>{_t(name)}</td>'
            f"<td>{_t(s.tokens)}</td><td>{lim(s.budget_tokens)}</td><td>{_t(s.gpu_s)}</td>"
            f"<td>{lim(s.budget_gpu_s)}</td><td>{_t('bound (' + s.bound + ')' if s.bound else '-')}"
            "</td></tr>")


def _batch_row(p: sec.BatchPoint) -> str:
    best = "-" if p.best is None else f"{p.best}/{p.cases_run or '-'}"
    return (f'<tr class="batch"><td>{_t(p.batch)}</td><td>{_t(p.function)}</td>'
            f"<td>{_t(p.model)}</td><td>{_t(p.compiled)}/{_t(p.candidates)}</td>"
            f"<td>{_t(best)}</td></tr>")


def queues_html(section: QueueSummary | sec.Missing | None) -> str:
    if section is None:           # not collected (a page from before the queues section)
        return ""
    return _section("queues", "Queue waits", _shown(section, _queues_table))


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{float(x):.2f} s"      # null: no sample, never 0


def _queue_row(queue: str, alias: str, f: Figures) -> str:
    return (f'<tr class="queue" data-queue="{_t(queue)}" data-alias="{_t(alias)}" '
            f'data-count="{int(f.count)}"><td>{_t(queue)}</td><td>{_t(alias or "-")}</td>'
            f"<td>{int(f.count)}</td><td>{_secs(f.p50_s)}</td><td>{_secs(f.p95_s)}</td>"
            f"<td>{_secs(f.max_s)}</td></tr>")


def _queues_table(section: QueueSummary) -> str:
    rows = [_queue_row("job", "", section.jobs)]
    rows += [_queue_row("draw", a, f) for a, f in section.draws.items()]
    window = float(section.window_s)
    return (_table(("queue", "alias", "samples", "p50", "p95", "max"), rows)
            + f'<p class="meta">jobs: submitted to first stage started; draws: request sent to the '
            f"first byte of the answer (nev's client); over the last {age(window)} "
            "(NEV_QUEUE_WINDOW); - is no sample</p>")


def floors_html(section: list[sec.FloorRow] | sec.Missing | None) -> str:
    return _section("floors", "Floors", _shown(section, _floors_table))


def _floors_table(section: list[sec.FloorRow]) -> str:
    return _table(("function", "floor", "admitted with", "batch"), map(_floor_row, section))


def _floor_row(f: sec.FloorRow) -> str:
    floor = "none" if f.floor_passed is None else f"{f.floor_passed}/{f.floor_run}"
    adm = f"{f.admitted_passed}/{f.admitted_run if f.admitted_run is not None else '-'}"
    return (f'<tr class="floor" data-function="{_t(f.function)}"><td>{_t(f.function)}</td>'
            f"<td>{_t(floor)}</td><td>{_t(adm)}</td><td>{_t(f.batch)}</td></tr>")


def render(data: sec.Collection, refresh_s: int) -> str:
    at = data.collected_at
    when = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if at else "-"
    body = "".join([
        lanes_html(data.lanes, data.dagu),
        aliases_html(data.aliases),
        replicas_html(data.replicas),
        jobs_html(data.jobs, data.lane_jobs),
        batches_html(data.batches),
        queues_html(data.queues),
        floors_html(data.floors),
    ])
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="refresh" content="{int(refresh_s)}">'
            "<meta name=\"viewport\" content=\"width=device-width\">"
            f"<title>nev rig</title><style>{CSS}</style></head><body>"
            f'<h1>nev rig</h1><p class="meta" id="collected">collected {when} in {"-" if data.took_s is None else data.took_s} s; '
            f"this page reloads every {int(refresh_s)} s</p>{body}</body></html>")
