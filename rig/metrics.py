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
from typing import TYPE_CHECKING, Any

from lanes.base import jsonfile, notify
from lanes.base.errors import NevError
from lanes.base.mask import mask
from rig import queues
from rig.queues import QUANTILES

if TYPE_CHECKING:
    from lanes.base.inventory_record import Summary

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

    aliases: dict[str, Any] | None = None  # `nev rig status --json`'s summary
    jobs: dict[str, str] | None = None  # job -> status
    lanes: list[dict[str, Any]] | None = None  # `nev lane list --json`'s rows
    dagu: list[dict[str, Any]] | None = None  # runs queued or running
    counts: dict[str, int] | None = None
    queues: dict[str, Any] | None = None  # `rig.queues.summary`
    missing: dict[str, str] = field(default_factory=dict)


def _label(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def samples(state: State) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Family -> its samples (labels, value) (pure)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {n: [] for n in FAMILIES}
    for src in SOURCES:
        out["nev_source_up"].append(({"source": src}, 0.0 if src in state.missing else 1.0))
    if state.aliases is not None:
        for r in state.aliases["aliases"]:
            if r["status"] != "retired":
                out["nev_alias_ready"].append(
                    ({"alias": r["alias"]}, 1.0 if r["status"] == "ready" else 0.0)
                )
        age = state.aliases.get("snapshot_age_s")
        if isinstance(age, int | float):
            out["nev_inventory_age_seconds"].append(({}, float(age)))
    if state.jobs is not None:
        from jobs.records import JobStatus

        by: dict[str, int] = {}
        for st in state.jobs.values():
            by[st] = by.get(st, 0) + 1
        final = {s.value for s in JobStatus if s.final}
        out["nev_jobs_in_flight"].append(
            ({}, float(sum(n for s, n in by.items() if s not in final)))
        )
        out["nev_jobs"] += [({"status": s}, float(n)) for s, n in sorted(by.items())]
    if state.lanes is not None:
        for row in state.lanes:
            lane = {"lane": str(row["index"])}
            out["nev_lane_up"].append((lane, 1.0 if row.get("answers") else 0.0))
            if isinstance(row.get("free_gb"), int | float):
                out["nev_lane_disk_free_bytes"].append((lane, round(float(row["free_gb"]) * GiB)))
    if state.dagu is not None:
        out["nev_queue_depth"].append(
            ({}, float(sum(1 for r in state.dagu if r["status"] == "queued")))
        )
        out["nev_dagu_runs_running"].append(
            ({}, float(sum(1 for r in state.dagu if r["status"] == "running")))
        )
    if state.counts is not None:
        for name, kind in COUNTED.items():
            out[name].append(({}, float(state.counts.get(kind, 0))))
    if state.queues is not None:
        _waits(out, "nev_job_queue_wait", {}, state.queues["jobs"])
        for alias, f in state.queues["draws"].items():
            _waits(out, "nev_draw_queue_wait", {"alias": alias}, f)
    return out


def _waits(out: dict[str, list[tuple[dict[str, str], float]]], base: str, labels: dict[str, str],
           f: Mapping[str, Any]) -> None:
    """One queue's summary (`_sum` and `_count` under their own names) and max; nothing at all
    when it has no sample (a quantile of nothing is not 0)."""
    if not f["count"]:
        return
    for q, key in zip(QUANTILES, ("p50_s", "p95_s"), strict=True):
        out[f"{base}_seconds"].append(({**labels, "quantile": str(q)}, float(f[key])))
    out.setdefault(f"{base}_seconds_sum", []).append((labels, float(f["sum_s"])))
    out.setdefault(f"{base}_seconds_count", []).append((labels, float(f["count"])))
    out[f"{base}_max_seconds"].append((labels, float(f["max_s"])))


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
        for sample, got in parts:
            for labels, v in got:
                lab = ",".join(f'{k}="{_label(x)}"' for k, x in labels.items())
                lines.append(f"{sample}{{{lab}}} {_num(v)}" if lab else f"{sample} {_num(v)}")
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


def _lanes() -> list[dict[str, Any]]:
    from rig.dashboard import collect

    return collect.lanes()


def _dagu() -> list[dict[str, Any]]:
    from rig.dashboard import collect

    return collect.dagu_runs()


def gather(
    lane_index: int | None = None,
    skip: tuple[str, ...] = (),
    environ: Mapping[str, str] | None = None,
) -> State:
    """Every source not in `skip`, each read on its own; a failure is that source's `missing`."""
    state = State()
    readers: dict[str, Callable[[], Any]] = {
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
