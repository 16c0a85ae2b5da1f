"""A submitted job as its lane holds it, read from the development box.

The runner on the lane keeps the job's state in `WORK/<job>/state/` (`jobs/lane_main.py`, WORK
being the workflow's parameter, recorded at submit): `events.jsonl` (`jobs/state.py`, append
only) and each stage's log, `logs/<stage>.log` (named by its `stage-started`
event; masked as it is written, `jobs/stagelog.py`). They are read over the lanes file's SSH
connection to the job's lane (`Lane.connect`, through the jump host, the lane `nev job submit`
chose) by one small standard-library program run with the lane's python3 (`read_files`): each
file from a byte offset, at most a cap, with its size and inode, in one command.

- `views`: each job's events read whole once (`nev job status NAME`, the dashboard: one SSH
  command per lane and refresh) and replayed (`jobs.state.replay`).
- `follow` (`nev job status NAME --follow`) is in `jobs/follow.py`; the remote reader both use
  is `jobs/laneread.py`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from jobs import archive
from jobs.laneread import LaneReader
from jobs.records import JobRecord
from jobs.state import (
    CLOCK,
    EVENTS,
    JobEvent,
    JobView,
    StageView,
    Status,
    parse_iso,
    replay,
    valid_prefix,
)
from lanes.base import settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.mask import mask

if TYPE_CHECKING:
    from lanes.lanesfile import Lane

EVENTS_CAP = 8 << 20  # at most this much of one events file per read


# -- where a job is -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """A submitted job's place: its lane, its state folder there (`~` the lane user's home), the
    run this box last sent and the share it archives to."""

    job: str
    lane: Lane
    state: str
    run_id: str | None = None
    share: str | None = None

    @property
    def events(self) -> str:
        return posixpath.join(self.state, EVENTS)

    @property
    def clock(self) -> str:
        return posixpath.join(self.state, CLOCK)

    @property
    def archived(self) -> str | None:
        """The marker the archive step writes (`jobs/archive.py`); the cleanup step removes the
        job's folder only after it, once the job passed and was published."""
        if not (self.share and self.run_id):
            return None
        return str(archive.marker(Path(self.share), self.job, self.run_id))

    def label(self) -> str:
        return self.lane.label


def where(rec: JobRecord) -> Where:
    """Where `nev job submit` sent the job (its record): the lane as `nev dagu`/submit choose it
    (--lane, else NEV_DAGU_LANE, ...), the state folder under the run's WORK parameter (a record
    without one: NEV_DAGU_DIR's jobs-work)."""
    from dagu.layout import Layout, resolve_root
    from dagu.service import pick_lane

    work = (
        rec.params.get("WORK")
        or Layout(resolve_root(settings.value(settings.DAGU_DIR), "~")).jobs_work
    )
    return Where(
        rec.job,
        pick_lane(rec.lane),
        posixpath.join(work, rec.job, "state"),
        rec.run_id,
        rec.params.get("SHARE") or None,
    )


def events_of(text: bytes, label: str) -> list[JobEvent]:
    """The valid prefix of an events file's bytes (ConfigError for an edited line, as in
    `nev job status`)."""
    return valid_prefix(text.decode("utf-8", "replace"), label)[0]


def this_run(view: JobView, run_id: str | None) -> bool:
    """The state is of the run this box sent (no run recorded: any)."""
    return run_id is None or bool(view.attempts) and view.attempts[-1].run_id == run_id


def current_stage(view: JobView) -> tuple[str, StageView] | None:
    running = [(n, s) for n, s in view.stages.items() if s.status is Status.RUNNING]
    return max(running, key=lambda x: x[1].started or "") if running else None


def stage_age(s: StageView, now: float) -> float | None:
    try:
        return max(0.0, now - parse_iso(s.started)) if s.started else None
    except ValueError:
        return None


@dataclass
class LaneJob:
    """A job's state as its lane holds it now: `view` None when there is none (yet, or any more)."""

    where: Where
    view: JobView | None
    now: float

    def summary(self) -> LaneSummary:
        v = self.view
        if v is None:
            return LaneSummary(self.where.label(), self.where.state, "no state yet", False)
        cur = current_stage(v)
        age = stage_age(cur[1], self.now) if cur else None
        return LaneSummary(
            self.where.label(),
            self.where.state,
            v.status.value,
            this_run(v, self.where.run_id),
            {n: s.status.value for n, s in v.stages.items()},
            run_id=v.attempts[-1].run_id if v.attempts else None,
            attempts=len(v.attempts),
            stage=cur[0] if cur else None,
            stage_age_s=round(age, 1) if age is not None else None,
        )


@dataclass
class LaneSummary:
    """What a person reads of a job's lane state (`nev job status NAME`, the dashboard's row)."""

    lane: str
    state: str  # the state folder on the lane
    status: str  # the job's, or "no state yet"
    this_run: bool  # the state is of the run this box sent last
    stages: dict[str, str] = field(default_factory=dict)
    run_id: str | None = None
    attempts: int | None = None  # None: no state yet
    stage: str | None = None  # the running stage
    stage_age_s: float | None = None  # on the lane's clock

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "lane": self.lane,
            "state": self.state,
            "status": self.status,
            "this_run": self.this_run,
        }
        if self.attempts is not None:
            out.update(
                run_id=self.run_id,
                attempts=self.attempts,
                stage=self.stage,
                stage_age_s=self.stage_age_s,
            )
        out["stages"] = dict(self.stages)
        return out

    def lines(self, job: str) -> list[str]:
        """The lines of `nev job status NAME` (pure)."""
        head = f"{job} on {self.lane}: {self.status}"
        if self.attempts is None:
            return [f"{head} (queued or preparing: {self.state})"]
        head += f", attempt {self.attempts}"
        if not self.this_run:
            head += f" of run {self.run_id} (an earlier run; the one sent last has not started)"
        if self.stage:
            age = self.stage_age_s
            head += f"; stage {self.stage} running" + (f" for {age:.0f} s" if age is not None else "")
        return [head] + [f"  {n:<20} {st}" for n, st in self.stages.items()]


def _conn_key(lane: Lane) -> tuple[str, str | None]:
    return lane.ssh, lane.jump


def views(wheres: Iterable[Where]) -> dict[str, LaneJob | str]:
    """Each job's state on its lane, or why it could not be read (one line): one connection and one
    read per lane."""
    from lanes.base.ssh import link_errors

    failures: tuple[type[BaseException], ...] = (NevError, *link_errors())
    by_lane: dict[tuple[str, str | None], list[Where]] = {}
    for w in wheres:
        by_lane.setdefault(_conn_key(w.lane), []).append(w)
    out: dict[str, LaneJob | str] = {}
    for ws in by_lane.values():
        reqs = [(w.events, 0, EVENTS_CAP) for w in ws]
        try:
            conn = ws[0].lane.connect()
            try:
                reply = LaneReader(conn).read(reqs)
            finally:
                conn.close()
        except failures as e:
            why = mask(str(e) or type(e).__name__)
            for w in ws:
                out[w.job] = why
            continue
        for i, w in enumerate(ws):
            ev = reply.files[i]
            if ev.error:
                out[w.job] = f"cannot read {w.events} on {w.label()}: {ev.error}"
                continue
            try:
                view = None if ev.missing else replay(events_of(ev.data, f"{w.label()}:{w.events}"))
            except ConfigError as e:
                out[w.job] = e.message
                continue
            out[w.job] = LaneJob(w, view, reply.now)
    return out
