"""The dashboard's sections as typed records: built by `collect`, rendered by `page` from their
attributes, written to /data.json by `to_json` (the keys every version served).

A row built from another command's document (a lane of `nev lane list`, an alias of `nev rig
status --json`, a job of `nev job status`) keeps that document as it came (`doc`) and serves it
unchanged; the fields the page reads are attributes. A row the dashboard makes itself (a Dagu run,
a job folder, a batch point, a floor) is its fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from bench.ledger import Spend  # a worktree's or job's spend against its budget

if TYPE_CHECKING:  # the types only: the page loads none of the sources' modules
    from jobs.lanestate import LaneSummary
    from lanes.base.inventory_record import RowJson
    from rig.queues import QueueSummary
    from rig.serving.state import ReplicaState


@dataclass(frozen=True)
class Missing:
    """A source that is not there: the reason, shown instead of its section."""

    reason: str

    def to_json(self) -> dict[str, object]:
        return {"unavailable": self.reason}


def _opt_float(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


# -- lanes -----------------------------------------------------------------


@dataclass(frozen=True)
class LaneRow:
    """One lane of `lanes.gate.lane_status()` (`nev lane list`); `doc` is its row as made there."""

    doc: dict[str, object]
    index: int
    name: str
    answers: bool
    free_gb: float | None
    copies: object            # a list of copy names (or descriptions), None when not answered
    running: list[str] | None
    note: str                 # the row's error (or note), "" when none

    @classmethod
    def of(cls, row: dict[str, object]) -> LaneRow:
        idx, running = row.get("index"), row.get("running")
        return cls(
            doc=row,
            index=idx if isinstance(idx, int) else -1,
            name=str(row.get("name") or ""),
            answers=bool(row.get("answers")),
            free_gb=_opt_float(row.get("free_gb")),
            copies=row.get("copies"),
            running=[str(x) for x in running] if isinstance(running, list) else None,
            note=str(row.get("error") or row.get("note") or ""),
        )

    def to_json(self) -> dict[str, object]:
        return self.doc


@dataclass(frozen=True)
class DaguRun:
    """A Dagu run queued or running."""

    name: str | None
    run_id: str | None
    status: str
    started_at: str | None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


# -- aliases ---------------------------------------------------------------


@dataclass(frozen=True)
class AliasesSection:
    """The snapshot's aliases (`nev rig status --json`'s rows, each with its in-flight limit)."""

    rows: list[RowJson]
    snapshot: str
    probe_age_s: float | None
    hosts_up: int
    hosts: int

    def to_json(self) -> dict[str, object]:
        return {"rows": list(self.rows), "snapshot": self.snapshot, "probe_age_s": self.probe_age_s,
                "hosts_up": self.hosts_up, "hosts": self.hosts}


# -- jobs ------------------------------------------------------------------


@dataclass(frozen=True)
class JobRow:
    """A job state folder here: its status and stages; an unreadable one says why (`error`)."""

    job: str
    status: str
    stages: dict[str, str]
    attempts: int | None = None
    last_event: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"job": self.job, "status": self.status, "stages": self.stages}
        if self.error is not None:
            return {**out, "error": self.error}
        return {**out, "attempts": self.attempts, "last_event": self.last_event}


@dataclass(frozen=True)
class LaneJobRow:
    """A job in flight as its lane holds it (`summary`), or why its lane was not read."""

    job: str
    summary: LaneSummary | None = None
    lane: str | None = None           # with `unavailable`: the lane not read, when known
    unavailable: str | None = None

    def to_json(self) -> dict[str, object]:
        if self.summary is not None:
            return {"job": self.job, **self.summary.to_json()}
        out: dict[str, object] = {"job": self.job}
        if self.lane is not None:
            out["lane"] = self.lane
        out["unavailable"] = self.unavailable
        return out


# -- batches ---------------------------------------------------------------


@dataclass(frozen=True)
class BatchPoint:
    """One batch and model: its time, best score and compiled share."""

    batch: object
    function: object
    model: str
    time: float | None
    best: object
    cases_run: object
    best_share: float | None
    compiled: object
    candidates: object
    compiled_share: float | None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class BatchesSection:
    """Every worktree's ledger lines in time order, their points, and each one's spend."""

    folder: str
    # the ledger lines as `bench.ledger.read_lenient` gave them (each with its `_worktree`): JSON
    # documents served on /data.json as read; the page reads them only through `points`
    lines: list[dict[str, object]]
    points: list[BatchPoint]
    unreadable_lines: int
    spend: dict[str, Spend] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"folder": self.folder, "lines": self.lines,
                "points": [p.to_json() for p in self.points], "unreadable_lines": self.unreadable_lines,
                "spend": {k: s.to_json() for k, s in self.spend.items()}}


# -- floors ----------------------------------------------------------------


@dataclass(frozen=True)
class FloorRow:
    """A generated function's committed floor and the score it was admitted with."""

    function: str
    batch: str | None
    admitted_passed: int | None
    admitted_run: int | None
    floor_passed: int | None
    floor_run: int | None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


# -- the page's data -------------------------------------------------------


@dataclass
class Collection:
    """One collection: each section, or why it is missing; None for a section not collected."""

    lanes: list[LaneRow] | Missing | None = None
    dagu: list[DaguRun] | Missing | None = None
    aliases: AliasesSection | Missing | None = None
    replicas: list[ReplicaState] | Missing | None = None
    jobs: list[JobRow] | Missing | None = None
    lane_jobs: list[LaneJobRow] | Missing | None = None
    batches: BatchesSection | Missing | None = None
    queues: QueueSummary | Missing | None = None
    floors: list[FloorRow] | Missing | None = None
    collected_at: float | None = None
    took_s: float | None = None

    def missing(self) -> list[str]:
        """The sections whose source was not there, in the page's order."""
        return [n for n in NAMES if isinstance(getattr(self, n), Missing)]

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for n in NAMES:
            v = getattr(self, n)
            if v is not None:
                out[n] = jsonable(v)
        if self.collected_at is not None:
            out["collected_at"] = self.collected_at
            out["took_s"] = self.took_s
        return out


NAMES = ("lanes", "dagu", "aliases", "replicas", "jobs", "lane_jobs", "batches", "queues", "floors")


def jsonable(value: object) -> object:
    """A section (a record, a list of them, or a marker) as /data.json serves it."""
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else value
