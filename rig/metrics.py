"""`nev rig metrics`: the rig's state in Prometheus's text exposition format (docs/notify.md).

Each source is read by the reader its own command uses, and one that cannot be read is
`nev_source_up{source=...} 0` with its families left out (never a made-up zero):

- aliases, read as `nev rig status` does (`rig.inventory.status`): `nev_alias_ready`,
  `nev_inventory_age_seconds`;
- jobs, the job records as `nev job status` reads them: `nev_jobs_in_flight`, `nev_jobs`;
- lanes, as `nev lane list` (`lanes.gate.lane_status`): `nev_lane_up`,
  `nev_lane_disk_free_bytes`;
- dagu, the Dagu lane's API (the dashboard's `dagu`): `nev_queue_depth`,
  `nev_dagu_runs_running`;
- counts, the state folder's (`lanes.base.notify.counts`): `nev_landings_total`,
  `nev_job_failures_total`, `nev_tick_failures_total`;
- queues, the job records and the share's ledgers (`rig.queues`): `nev_job_queue_wait_seconds`
  and `nev_draw_queue_wait_seconds{alias}` (summaries: p50 and p95, `_sum`, `_count`) with their
  `..._max_seconds`; a queue with no sample in the window (NEV_QUEUE_WINDOW) is left out.

`render` is pure; `gather` reads the sources.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lanes.base import jsonfile, notify
from lanes.base.errors import NevError
from lanes.base.mask import mask
from rig import queues
from rig.queues import QUANTILES

if TYPE_CHECKING:
    from lanes.base.inventory_record import Summary
    from rig.dashboard.sections import DaguRun, LaneRow

SOURCES = ("aliases", "jobs", "lanes", "dagu", "counts", "queues")
GiB = 1 << 30  # the lane agent's free_gb is in GiB (statvfs bytes / 2**30)

# name -> (type, help): every family `render` may write, in its order (docs/notify.md lists them)
FAMILIES: dict[str, tuple[str, str]] = {
    "nev_source_up": (
        "gauge",
        "1 when the source was read, 0 when it was not (its families are left out)",
    ),
    "nev_alias_ready": (
        "gauge",
        "1 when the alias is ready in the inventory snapshot (nev rig status), else 0",
    ),
    "nev_inventory_age_seconds": (
        "gauge",
        "seconds since the inventory snapshot's last probe round",
    ),
    "nev_jobs_in_flight": (
        "gauge",
        "jobs this box submitted that have not landed, failed or been refused",
    ),
    "nev_jobs": ("gauge", "jobs this box submitted, by their status in the job records"),
    "nev_lane_up": ("gauge", "1 when the lane answered, else 0"),
    "nev_lane_disk_free_bytes": ("gauge", "free bytes under the lane root"),
    "nev_queue_depth": ("gauge", "Dagu runs queued on the Dagu lane"),
    "nev_dagu_runs_running": ("gauge", "Dagu runs running on the Dagu lane"),
    "nev_landings_total": ("counter", "jobs landed by the tick, counted in the state folder"),
    "nev_job_failures_total": (
        "counter",
        "jobs failed for good or not landed, counted in the state folder",
    ),
    "nev_tick_failures_total": ("counter", "ticks that failed, counted in the state folder"),
    "nev_job_queue_wait_seconds": (
        "summary",
        "seconds from a job's submission to its first stage started, over NEV_QUEUE_WINDOW",
    ),
    "nev_job_queue_wait_max_seconds": ("gauge", "the longest job queue wait in the window"),
    "nev_draw_queue_wait_seconds": (
        "summary",
        "seconds from a draw's request sent to the first byte of its answer (nev's client; "
        "not streamed: the byte comes with the whole answer), per alias, over NEV_QUEUE_WINDOW",
    ),
    "nev_draw_queue_wait_max_seconds": ("gauge", "the longest draw queue wait in the window"),
}
COUNTED = {
    "nev_landings_total": notify.Kind.LANDED,
    "nev_job_failures_total": notify.Kind.JOB_FAILED,
    "nev_tick_failures_total": notify.Kind.TICK_FAILED,
}


@dataclass
class State:
    """What `gather` read: each source's data, or why it was not read."""

    aliases: Summary | None = None  # `nev rig status --json`'s summary
    jobs: dict[str, str] | None = None  # job -> status
    lanes: list[LaneRow] | None = None  # `nev lane list --json`'s rows
    dagu: list[DaguRun] | None = None  # runs queued or running
    counts: dict[str, int] | None = None
    queues: queues.QueueSummary | None = None  # `rig.queues.summary`
    missing: dict[str, str] = field(default_factory=dict)


def _label(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


@dataclass(frozen=True)
class Sample:
    """One sample: its family (or a summary's `_sum`/`_count` series), labels and value."""

    family: str
    labels: dict[str, str]
    value: float

    def to_json(self) -> dict[str, object]:
        """The sample as `nev rig metrics --json` prints it under its family."""
        return {"labels": self.labels, "value": self.value}

    def line(self) -> str:
        """The sample's line of the text exposition format."""
        lab = ",".join(f'{k}="{_label(x)}"' for k, x in self.labels.items())
        head = f"{self.family}{{{lab}}}" if lab else self.family
        return f"{head} {_num(self.value)}"


class _Out:
    """The samples gathered so far, per family (or series), in the order first added."""

    def __init__(self) -> None:
        self.by: dict[str, list[Sample]] = {n: [] for n in FAMILIES}

    def add(self, family: str, labels: dict[str, str], value: float) -> None:
        self.by.setdefault(family, []).append(Sample(family, labels, value))


def samples(state: State) -> dict[str, list[Sample]]:
    """Family (or a summary's `_sum`/`_count` series) -> its samples (pure)."""
    out = _Out()
    for src in SOURCES:
        out.add("nev_source_up", {"source": src}, 0.0 if src in state.missing else 1.0)
    if state.aliases is not None:
        for r in state.aliases["aliases"]:
            if r["status"] != "retired":
                ready = 1.0 if r["status"] == "ready" else 0.0
                out.add("nev_alias_ready", {"alias": r["alias"]}, ready)
        age = state.aliases.get("snapshot_age_s")
        if isinstance(age, int | float):
            out.add("nev_inventory_age_seconds", {}, float(age))
    if state.jobs is not None:
        from jobs.records import JobStatus

        by: dict[str, int] = {}
        for st in state.jobs.values():
            by[st] = by.get(st, 0) + 1
        final = {s.value for s in JobStatus if s.final}
        out.add("nev_jobs_in_flight", {}, float(sum(n for s, n in by.items() if s not in final)))
        for s, n in sorted(by.items()):
            out.add("nev_jobs", {"status": s}, float(n))
    if state.lanes is not None:
        for row in state.lanes:
            lane = {"lane": str(row.index)}
            out.add("nev_lane_up", lane, 1.0 if row.answers else 0.0)
            if row.free_gb is not None:
                out.add("nev_lane_disk_free_bytes", lane, round(row.free_gb * GiB))
    if state.dagu is not None:
        out.add("nev_queue_depth", {}, float(sum(1 for r in state.dagu if r.status == "queued")))
        running = sum(1 for r in state.dagu if r.status == "running")
        out.add("nev_dagu_runs_running", {}, float(running))
    if state.counts is not None:
        for name, kind in COUNTED.items():
            out.add(name, {}, float(state.counts.get(kind, 0)))
    if state.queues is not None:
        _waits(out, "nev_job_queue_wait", {}, state.queues.jobs)
        for alias, f in state.queues.draws.items():
            _waits(out, "nev_draw_queue_wait", {"alias": alias}, f)
    return out.by


def _waits(out: _Out, base: str, labels: dict[str, str], f: queues.Figures) -> None:
    """One queue's summary (`_sum` and `_count` under their own names) and max; nothing at all
    when it has no sample (a quantile of nothing is not 0)."""
    if not f.count or f.p50_s is None or f.p95_s is None or f.max_s is None:
        return
    for q, v in zip(QUANTILES, (f.p50_s, f.p95_s), strict=True):
        out.add(f"{base}_seconds", {**labels, "quantile": str(q)}, float(v))
    out.add(f"{base}_seconds_sum", labels, float(f.sum_s))
    out.add(f"{base}_seconds_count", labels, float(f.count))
    out.add(f"{base}_max_seconds", labels, float(f.max_s))


def render(state: State) -> str:
    """The text exposition format (version 0.0.4): HELP and TYPE for each family with samples."""
    lines = []
    every = samples(state)
    for name, ss in every.items():
        if not ss or name not in FAMILIES:
            continue
        kind, help_ = FAMILIES[name]
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        parts = [(name, ss)]
        if kind == "summary":
            parts += [(f"{name}{x}", every.get(f"{name}{x}", [])) for x in ("_sum", "_count")]
        for _series, got in parts:
            lines += [s.line() for s in got]
    return "\n".join(lines) + "\n"


# -- reading the sources -------------------------------------------------------------------------


def _aliases(lane_index: int | None) -> Summary:
    from rig.inventory import inventoryfile
    from rig.inventory import status as st

    data, source = st.load(lane_index)
    return st.with_replicas(st.summary(data, inventoryfile.now_utc(), source))


def _jobs(environ: Mapping[str, str] | None) -> dict[str, str]:
    from jobs import records

    return {name: rec.status.value for name, rec in records.read(environ).jobs.items()}


def _lanes() -> list[LaneRow]:
    from rig.dashboard import collect

    return collect.lanes()


def _dagu() -> list[DaguRun]:
    from rig.dashboard import collect

    return collect.dagu_runs()


def gather(
    lane_index: int | None = None,
    skip: tuple[str, ...] = (),
    environ: Mapping[str, str] | None = None,
) -> State:
    """Every source not in `skip`, each read on its own; a failure is that source's `missing`."""
    state = State()
    readers: dict[str, Callable[[], object]] = {
        "aliases": lambda: _aliases(lane_index),
        "jobs": lambda: _jobs(environ),
        "lanes": _lanes,
        "dagu": _dagu,
        "counts": lambda: notify.counts(environ),
        "queues": lambda: queues.gather(environ),
    }
    for src in SOURCES:
        if src in skip:
            state.missing[src] = "skipped (--skip)"
            continue
        try:
            setattr(state, src, readers[src]())
        except NevError as e:
            state.missing[src] = mask(e.message)
        except Exception as e:  # noqa: BLE001 - one source down never hides the others
            state.missing[src] = mask(f"{type(e).__name__}: {e}")
    return state


def write(out: Path, text: str) -> None:
    """For node_exporter's textfile collector: written beside, then renamed over (mode 644)."""
    jsonfile.write_bytes_atomic(out, text.encode(), 0o644)
