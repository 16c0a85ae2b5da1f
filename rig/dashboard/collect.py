"""One collector per source of the dashboard. Each returns its section's typed records
(`rig/dashboard/sections.py`) or raises; `gather` turns a raise into the section's `Missing`
marker (`unavailable: <reason>`), so one missing source never breaks the page.

| section  | source |
|----------|--------|
| lanes    | `lanes.gate.lane_status()`: answering, free disk, copies, gates running (`nev lane list`) |
| dagu     | the Dagu lane's API (`dagu.service`): runs queued or running |
| aliases  | the inventory snapshot (NEV_INVENTORY): status, held for, last answer, in-flight limit; an alias whose replicas an operator drained or stopped shows `stopped` |
| replicas | HAProxy's runtime API (the rig file's serving roles) and the rig notes' change log: ready, drained, stopped, down |
| jobs     | the job state folders (`jobs/status.py`: NEV_STATE_DIR/jobs/*/state.json, the view `jobs/state.py` keeps): stage states |
| lane_jobs | each job in flight, on its lane (`jobs/lanestate.py`: one SSH read per lane): its
|          | running stage and that stage's age |
| batches  | the ledger (`bench/ledger.py`: `ledger/<worktree>.jsonl` on the share): one line per batch, and per worktree or job its spend against its budget |
| queues   | the queue waits (`rig/queues.py`): jobs submitted to first stage, draws sent to first byte; p50, p95, max |
| floors   | the engine's committed floor and provenance files, per function |
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lanes.base import jsonfile, settings
from lanes.base.errors import NevError
from lanes.base.mask import known_secrets, mask
from rig.dashboard.sections import (
    NAMES,
    AliasesSection,
    BatchesSection,
    BatchPoint,
    Collection,
    DaguRun,
    FloorRow,
    JobRow,
    LaneJobRow,
    LaneRow,
    Missing,
    Spend,
)

if TYPE_CHECKING:
    from rig.queues import QueueSummary
    from rig.serving.state import ReplicaState


class Unavailable(Exception):
    """A source that is not there (not configured, nothing recorded yet): the reason is shown."""


def unavailable(reason: str) -> Missing:
    return Missing(mask(reason, extra=known_secrets()))


# -- lanes -----------------------------------------------------------------

def lanes() -> list[LaneRow]:
    from lanes import gate  # here: the SSH stack loads only when the page shows lanes

    rows = gate.lane_status()
    if not rows:
        raise Unavailable("no build lane configured (NEV_LANE_SSH or the lanes file)")
    return [LaneRow.of(r) for r in rows]


# -- Dagu ------------------------------------------------------------------

def _opt_str(v: object) -> str | None:
    """A string field of Dagu's answer (a JSON document): None when absent."""
    return None if v is None else str(v)


def dagu_runs() -> list[DaguRun]:
    from dagu import service

    if not settings.get(settings.DAGU_LANE):
        raise Unavailable("NEV_DAGU_LANE is not set: no lane runs Dagu")
    with service.opened(None) as ld, ld.api() as api:
        runs = api.list_runs()
    out = []
    for r in runs:
        label = str(r.get("statusLabel") or r.get("status") or "")
        if label in ("running", "queued"):
            out.append(DaguRun(_opt_str(r.get("name")), _opt_str(r.get("dagRunId")), label,
                               _opt_str(r.get("startedAt") or r.get("queuedAt"))))
    return out


# -- aliases ---------------------------------------------------------------

def aliases() -> AliasesSection:
    """The snapshot's aliases: NEV_INVENTORY here, else (no file there) NEV_INVENTORY_LANE's."""
    from rig.inventory import inventoryfile, status

    path = inventoryfile.default_path()
    lane = status.snapshot_lane(None)
    if lane is not None:
        snap, source = status.load_from_lane(lane)
    elif not path.exists():
        raise Unavailable(f"no inventory snapshot at {path}: run `nev rig probe` (NEV_INVENTORY), "
                          "or set NEV_INVENTORY_LANE to the collector lane")
    else:
        snap, source = inventoryfile.read(path), str(path)
    now = inventoryfile.now_utc()
    s = status.summary(snap, now, source)
    limits = {n: a.max_inflight for n, a in snap.aliases.items()}
    for r in s["aliases"]:
        r["max_inflight"] = limits.get(r["alias"])
    try:
        from rig.serving.state import overlay

        overlay(s, serving_states())
    except (Unavailable, NevError):
        pass          # no serving roles or HAProxy not reached: the probe's statuses as they are
    return AliasesSection(s["aliases"], source, s["snapshot_age_s"],
                          sum(1 for h in s["hosts"] if h["status"] == "up"), len(s["hosts"]))


# -- serving replicas ------------------------------------------------------

def serving_states() -> list[ReplicaState]:
    from rig import rigfile
    from rig.serving import state
    from rig.snapshot.context import notes_dir

    path = rigfile.default_path()
    rig_file = rigfile.load(path) if path.exists() else None
    if rig_file is None or not rig_file.serving:
        raise Unavailable(f"no serving roles in {path} (NEV_RIG_FILE)")
    return state.gather(rig_file, notes_dir())


def replicas() -> list[ReplicaState]:
    return serving_states()


# -- jobs ------------------------------------------------------------------

def jobs_dir() -> Path:
    """Where `nev job run` keeps each job's state folder (jobs/status.py)."""
    from jobs.status import jobs_folder

    return jobs_folder()


def jobs() -> list[JobRow]:
    root = jobs_dir()
    if not root.is_dir():
        return []          # no job has run here yet: an empty state, not a failure
    out: list[JobRow] = []
    from jobs.state import STATE, JobView

    for f in sorted(root.glob(f"*/{STATE}")):
        try:
            st = JobView.from_json(jsonfile.Fields(f), jsonfile.load(f, "job state"))
        except NevError as e:
            out.append(JobRow(f.parent.name, "unreadable", {}, error=str(e)))
            continue
        out.append(JobRow(st.job or f.parent.name, st.status.value,
                          {n: s.status.value for n, s in st.stages.items()}, len(st.attempts),
                          st.last_event.time if st.last_event else None))
    return out


def lane_jobs() -> list[LaneJobRow]:
    """Each job in flight (submitted or resent from this box) as its lane holds it: its status, its
    running stage and that stage's age on the lane's clock (`jobs/lanestate.py`: one SSH read per
    lane); a lane that does not answer makes its jobs' rows `unavailable`."""
    from jobs import lanestate, records

    recs = records.read()
    if not recs.jobs:
        return []          # nothing submitted from here: nothing in flight
    out: list[LaneJobRow] = []
    wheres = []
    for rec in sorted(recs.jobs.values(), key=lambda r: r.job):
        if rec.status.final:
            continue
        try:
            wheres.append(lanestate.where(rec))
        except NevError as e:
            out.append(LaneJobRow(rec.job, unavailable=mask(e.message, extra=known_secrets())))
    for name, got in lanestate.views(wheres).items():
        if isinstance(got, str):
            out.append(LaneJobRow(name, lane=next(w.label() for w in wheres if w.job == name),
                                  unavailable=mask(got, extra=known_secrets())))
        else:
            out.append(LaneJobRow(name, got.summary()))
    return sorted(out, key=lambda r: r.job)


# -- batches (the ledger) --------------------------------------------------

def ledger_dir() -> Path:
    """The ledger folder, found as `nev ledger` finds it (bench/ledger.py): NEV_LANE_SHARED on a
    lane or when set, else the lanes file's `nas` folder on the dev box."""
    from bench import ledger

    d = ledger.ledger_dir()
    if not d.is_dir():
        raise Unavailable(f"no ledger folder at {d}: no batch has run, or the share is not mounted here "
                          "(NEV_LANE_SHARED, or `nas` in the lanes file)")
    return d


def parse_time(value: object) -> float | None:
    from lanes.base.isotime import parse

    t = parse(value)
    return None if t is None else t.timestamp()


def _share(part: object, whole: object) -> float | None:
    if isinstance(part, int | float) and isinstance(whole, int | float) and whole:
        return part / whole
    return None


def batch_points(lines: list[dict[str, object]]) -> list[BatchPoint]:
    """Per batch and model: time, best score as a share of the cases run, compiled share (pure).
    The one place the dashboard reads a ledger line's fields (lines as `bench.ledger` reads them)."""
    pts = []
    for ln in lines:
        t = parse_time(ln.get("end")) or parse_time(ln.get("start"))
        run = ln.get("cases_run")
        models = ln.get("models")
        for alias, m in sorted(models.items() if isinstance(models, dict) else ()):
            if not isinstance(m, dict):
                continue
            best, cand, comp = m.get("best"), m.get("candidates"), m.get("compiled")
            pts.append(BatchPoint(ln.get("batch"), ln.get("function"), str(alias), t, best, run,
                                  _share(best, run), comp, cand, _share(comp, cand)))
    return pts


def batches() -> BatchesSection:
    """Every worktree's ledger lines in time order. A line `nev ledger` refuses (not JSON, a bad
    field: `bench.ledger.parse_line`) or an unreadable file is skipped and counted (the page shows
    the rest)."""
    d = ledger_dir()
    from bench.ledger import read_lenient, spend

    lines: list[dict[str, object]] = []      # each line's JSON as stored, and its ledger's name
    spends: dict[str, Spend] = {}
    bad = 0
    for f in sorted(d.glob("*.jsonl")):
        mine, unreadable = read_lenient(f)
        bad += unreadable
        lines += [{**ln.to_json(), "_worktree": f.stem} for ln in mine]
        if mine:
            spends[f.stem] = spend(mine)
    lines.sort(key=lambda ln: parse_time(ln.get("end")) or parse_time(ln.get("start")) or 0.0)
    return BatchesSection(str(d), lines, batch_points(lines), bad, spends)


# -- floors ----------------------------------------------------------------

def floors() -> list[FloorRow]:
    from crates_bridge.registry import discover
    from crates_bridge.workspace import Workspace

    engine = settings.path_under(settings.ENGINE_DIR, Path.cwd())
    if not engine.is_dir():
        raise Unavailable(f"no engine workspace at {engine} (NEV_ENGINE_DIR)")
    out = []
    for fn in discover(Workspace(engine).generated_dir):
        out.append(FloorRow(fn.name, fn.provenance.batch, fn.provenance.cases_passed,
                            fn.provenance.cases_run, fn.floor.cases_passed if fn.floor else None,
                            fn.floor.cases_run if fn.floor else None))
    return out


# -- queue waits -----------------------------------------------------------

def queues() -> QueueSummary:
    from rig import queues as q

    return q.gather()


# -- all of them -----------------------------------------------------------

COLLECTORS: dict[str, Callable[[], object]] = {
    "lanes": lanes, "dagu": dagu_runs, "aliases": aliases, "replicas": replicas, "jobs": jobs,
    "lane_jobs": lane_jobs, "batches": batches, "queues": queues, "floors": floors,
}


def load_sources() -> None:
    """Import, in the calling thread, every module the collectors import on their first call.
    Imported first from several threads at once, a module can be seen half-initialised by one of
    them (the dashboard's first page once read `AttributeError: partially initialized module
    'paramiko'` for the lanes' jobs); imported here once, before any thread starts, it never is."""
    import bench.ledger  # noqa: F401
    import crates_bridge.registry  # noqa: F401
    import crates_bridge.workspace  # noqa: F401
    import dagu.service  # noqa: F401
    import jobs.lanestate  # noqa: F401
    import jobs.records  # noqa: F401
    import jobs.state  # noqa: F401
    import jobs.status  # noqa: F401
    import lanes.gate  # noqa: F401
    import rig.inventory.inventoryfile  # noqa: F401
    import rig.inventory.status  # noqa: F401
    import rig.queues  # noqa: F401
    import rig.rigfile  # noqa: F401
    import rig.serving.state  # noqa: F401
    import rig.snapshot.context  # noqa: F401
    from lanes.base import ssh

    ssh.load()  # paramiko: every collector that reaches a lane connects from a thread of its own


def run_all(collectors: dict[str, Callable[[], object]], timeout: float = 45.0) -> dict[str, object]:
    """Every collector at once, each in its own daemon thread under the same deadline (a source
    that hangs never holds the page or the process's exit); a failure is that source's `Missing`."""
    results: dict[str, object] = {}
    lock = threading.Lock()

    def run(name: str, fn: Callable[[], object]) -> None:
        try:
            value = fn()
        except Unavailable as e:
            value = unavailable(str(e))
        except Exception as e:  # noqa: BLE001 - any failure of one source is shown, never raised
            value = unavailable(f"{type(e).__name__}: {e}")
        with lock:
            results[name] = value

    t0 = time.time()
    threads = [threading.Thread(target=run, args=(n, fn), daemon=True, name=f"dashboard-{n}")
               for n, fn in collectors.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, timeout - (time.time() - t0)))
    with lock:
        return {name: results[name] if name in results else unavailable(f"no answer within {timeout:g} s")
                for name in collectors}


def gather(collectors: dict[str, Callable[[], object]] | None = None, timeout: float = 45.0) -> Collection:
    """Every section at once (`run_all`), as the page's `Collection`. The sources' modules are
    loaded first, in this thread (`load_sources`). A section's value is what its collector in
    COLLECTORS returns (or a stand-in for it, the tests'), or its `Missing`."""
    if collectors is None:
        load_sources()
    t0 = time.time()
    got = run_all(collectors or COLLECTORS, timeout)
    out = Collection()
    for name in NAMES:
        if name in got:     # the typed section its collector returns, or its Missing (`run_all`)
            setattr(out, name, got[name])
    out.collected_at = t0
    out.took_s = round(time.time() - t0, 2)
    return out
