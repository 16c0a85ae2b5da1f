"""A job's durable state: `events.jsonl` (append-only transitions) and `state.json` (a view).

Every transition is one line of `events.jsonl`: its sequence number, time, the
event, the stage, the inputs' hashes, the outputs' paths and the hash of the line
before it. The events are the truth; `state.json` is rebuilt from them by `replay`
(a pure function) and written atomically after every event, so a reader never sees
half a file. On open, the valid prefix of the events is kept (a line cut short by a
kill, or one whose chain breaks, ends it; what follows is cut off before the next
append) and the job resumes from the last valid transition. A whole line that is not JSON, or
that chains but names an event nev never records or holds a field of the wrong type, is refused
with one line naming it (a kill leaves no whole line behind).

While a stage runs, `clock.json` is rewritten every few seconds, so the wall-clock
time of an attempt that was killed still counts against the job's limit.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from lanes.base import jsonfile
from lanes.base.errors import ConfigError, NevError
from lanes.base.jsonfile import Fields

EVENTS = "events.jsonl"
STATE = "state.json"
CLOCK = "clock.json"
LOCK = "lock"



class Status(StrEnum):
    """A job's or a stage's state (state.json `status`); a job's outcome as its result records it."""

    PENDING = "pending"
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    STOPPED = "stopped"
    NOT_RUN = "not-run"
    INTERRUPTED = "interrupted"   # a stage the last attempt left running (it reruns from its start)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def line_hash(line: str) -> str:
    return hashlib.sha256(line.encode()).hexdigest()[:16]


def file_hash(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


class Event(StrEnum):
    """Every event `JobState.record` writes (jobs/runner.py), its value as `events.jsonl` holds it;
    a line naming another is refused."""

    RUN_STARTED = "run-started"
    PREFLIGHT_PASSED = "preflight-passed"
    PREFLIGHT_FAILED = "preflight-failed"
    INVENTORY_SKIPPED = "inventory-skipped"
    INVENTORY_PASSED = "inventory-passed"
    INVENTORY_TRANSIENT = "inventory-transient"
    INVENTORY_PERMANENT = "inventory-permanent"
    STAGE_STARTED = "stage-started"
    STAGE_PASSED = "stage-passed"
    STAGE_FAILED = "stage-failed"
    STAGE_STOPPED = "stage-stopped"
    STAGE_INTERRUPTED = "stage-interrupted"
    RESULT_COMMITTED = "result-committed"
    JOB_ENDED = "job-ended"

    @classmethod
    def of(cls, value: object) -> Event | None:
        """The event a line names; None for one nev never records."""
        return cls(value) if isinstance(value, str) and value in _EVENT_VALUES else None

    @property
    def stage(self) -> bool:
        """An event of one stage (it names its `stage`)."""
        return self.value.startswith("stage-")

    @property
    def inventory(self) -> str | None:
        """The inventory check's outcome this event records (None: not the inventory's)."""
        head, _, outcome = self.value.partition("-")
        return outcome if head == "inventory" else None


_EVENT_VALUES = frozenset(e.value for e in Event)
# The fields `replay` reads, by the type each must have when present.
_EVENT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "time": str, "stage": str, "job": str, "run_id": str, "inputs": dict, "stages": list, "reasons": list,
    "outputs": list, "log": str, "pgid": int, "boot": str, "commit": str, "outcome": str, "exit": int}


def check_event(ev: dict[str, object], label: str) -> None:
    """An event line as `replay` needs it (pure): a known event, `stage` on a stage's events, and
    each field `replay` reads of its type. ConfigError naming `label` (file and line) and the field."""
    f = Fields(label)
    named = f.get(ev, "event", str, "")
    kind = Event.of(named)
    if kind is None:
        import difflib

        near = difflib.get_close_matches(named, sorted(_EVENT_VALUES), 1)
        raise f.fail("event", f"is {named!r}, not an event nev records" + (f" (did you mean {near[0]!r}?)" if near else ""))
    for key, kinds in _EVENT_FIELDS.items():
        f.get(ev, key, kinds, "", required=key == "stage" and kind.stage)
    for key in ("stages", "outputs"):
        f.str_list(ev, key, "")
    if "time" in ev:
        try:
            parse_iso(str(ev["time"]))
        except (ValueError, OverflowError):
            raise f.fail("time", f"is {str(ev['time'])[:40]!r}, not a time (ISO 8601, as nev writes it)") from None
    for i, r in enumerate(_strs_or_list(ev.get("reasons"))):
        f.get(f.obj(r, f"reasons[{i}]"), "message", str, f"reasons[{i}]", required=False)
    if kind is Event.JOB_ENDED and ev.get("outcome") not in {s.value for s in Status}:
        raise f.fail("outcome", f"is {ev.get('outcome')!r}, not one of {', '.join(s.value for s in Status)}")


def valid_prefix(text: str, label: str = EVENTS) -> tuple[list[JobEvent], int]:
    """The events of the valid prefix and its length in bytes (of `text` encoded as UTF-8). A
    whole line (newline-ended) that is not JSON the one reader reads, or that chains but names an
    unknown event or holds a field of the wrong type, is refused (ConfigError naming `label`, the
    line and the field): it is an edit, never a kill's doing (a kill leaves a line without its
    newline, which ends the prefix)."""
    events: list[JobEvent] = []
    prev = ""
    size = 0
    for n, raw in enumerate(text.splitlines(keepends=True), 1):
        if not raw.endswith("\n"):
            break  # cut short by a kill
        line = raw[:-1]
        ev = jsonfile.parse(line, f"{label}: line {n}", "event log")   # a whole line is never a kill's
        if not isinstance(ev, dict) or ev.get("seq") != len(events) + 1 or ev.get("prev", "") != prev:
            break
        events.append(JobEvent.from_json(ev, f"{label}: line {n}", line))
        prev = line_hash(line)
        size += len(raw.encode())
    return events, size


@dataclass(frozen=True)
class JobEvent:
    """One line of `events.jsonl`, parsed once at the file's edge (`valid_prefix`, after
    `check_event`): what every reader past it (`replay`, --follow, the runner) sees. `line` is
    the line as written, whose hash the next line chains; a field this version does not read
    (`same_boot`, `by`) stays in it."""

    seq: int
    event: Event
    time: str = ""
    stage: str | None = None
    job: str | None = None
    run_id: str | None = None
    inputs: dict[str, str | None] = field(default_factory=dict)   # what the transition read: hashes
    stages: tuple[str, ...] = ()
    reasons: tuple[dict[str, object], ...] = ()   # each as its check wrote it, `message` a string
    outputs: tuple[str, ...] = ()
    log: str | None = None
    pgid: int | None = None
    boot: str | None = None
    commit: str | None = None
    outcome: str | None = None
    exit: int | None = None
    reason: str | None = None       # why a stage failed or was stopped, as the runner said it
    line: str = ""

    @classmethod
    def from_json(cls, ev: dict[str, object], label: str, line: str | None = None) -> JobEvent:
        """A decoded event line (ConfigError naming `label` and the field, `check_event`)."""
        check_event(ev, label)
        kind = Event.of(ev["event"])
        assert kind is not None                      # check_event refused any other

        def text(key: str) -> str | None:
            v = ev.get(key)
            return v if isinstance(v, str) else None

        def number(key: str) -> int | None:
            v = ev.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        raw_inputs = ev.get("inputs")
        inputs = {str(k): (v if isinstance(v, str) else None)
                  for k, v in (raw_inputs.items() if isinstance(raw_inputs, dict) else ())}
        reasons = ev.get("reasons")
        seq = ev.get("seq")
        return cls(seq=seq if isinstance(seq, int) else 0, event=kind, time=text("time") or "",
                   stage=text("stage"), job=text("job"), run_id=text("run_id"), inputs=inputs,
                   stages=tuple(_strs(ev.get("stages"))),
                   reasons=tuple(r for r in (reasons if isinstance(reasons, list) else ())
                                 if isinstance(r, dict)),
                   outputs=tuple(_strs(ev.get("outputs"))), log=text("log"), pgid=number("pgid"),
                   boot=text("boot"), commit=text("commit"), outcome=text("outcome"),
                   exit=number("exit"), reason=text("reason"),
                   line=line if line is not None else json.dumps(ev, sort_keys=True))


def _strs_or_list(v: object) -> list[object]:
    return v if isinstance(v, list) else []


def _strs(v: object) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


@dataclass
class StageView:
    status: Status = Status.PENDING
    runs: int = 0
    started: str | None = None
    ended: str | None = None
    head_at_start: str | None = None
    digest: str | None = None
    commit: str | None = None
    log: str | None = None
    exit: int | None = None
    pgid: int | None = None
    outputs: list[str] = field(default_factory=list)
    boot: str | None = None        # the boot the stage started in (`lanes.base.procgroup.boot_id`)


@dataclass
class Attempt:
    n: int
    started: str
    last_seen: str
    run_id: str | None = None


@dataclass
class PreflightView:
    ok: bool
    reasons: list[dict[str, object]]
    at: str | None


@dataclass
class InventoryView:
    outcome: str            # ready, not-ready, refused (bench.readiness.report)
    exit: int | None
    reasons: list[dict[str, object]]
    at: str | None
    snapshot: str | None


@dataclass
class ResultView:
    outcome: str | None
    exit: int | None
    commit: str | None
    at: str | None


@dataclass
class LastEvent:
    seq: int | None
    event: str | None
    time: str | None
    stage: str | None


@dataclass
class JobView:
    """A job's state after its events (`replay`), what state.json holds (plus `used_s`)."""

    schema: int = 1
    job: str | None = None
    status: Status = Status.PENDING
    manifest: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    preflight: PreflightView | None = None
    inventory: InventoryView | None = None
    stages: dict[str, StageView] = field(default_factory=dict)
    result: ResultView | None = None
    events: int = 0
    last_event: LastEvent | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, f: Fields, obj: Any) -> JobView:
        """A state.json as read back (the dashboard): missing fields take their defaults; a field of
        the wrong kind is named with the file."""
        o = f.obj(obj, "(top level)")

        def opt(d: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = None) -> Any:
            return f.get(d, key, kind, where, required=False, default=default)

        def status(d: dict[str, Any], where: str) -> Status:
            raw = opt(d, "status", str, where, Status.PENDING.value)
            try:
                return Status(raw)
            except ValueError:
                raise f.fail(f"{where}.status" if where else "status", f"is {raw!r}, not one of "
                             f"{', '.join(x.value for x in Status)}") from None

        stages = {}
        for name, raw in opt(o, "stages", dict, "", {}).items():
            d = f.obj(raw, f"stages.{name}")
            w = f"stages.{name}"
            stages[name] = StageView(status(d, w), opt(d, "runs", int, w, 0), opt(d, "started", str, w),
                                     opt(d, "ended", str, w), opt(d, "head_at_start", str, w), opt(d, "digest", str, w),
                                     opt(d, "commit", str, w), opt(d, "log", str, w), opt(d, "exit", int, w),
                                     opt(d, "pgid", int, w), f.str_list(d, "outputs", w), opt(d, "boot", str, w))
        attempts = []
        for i, raw in enumerate(opt(o, "attempts", list, "", [])):
            d, w = f.obj(raw, f"attempts[{i}]"), f"attempts[{i}]"
            attempts.append(Attempt(opt(d, "n", int, w, i + 1), opt(d, "started", str, w, ""),
                                    opt(d, "last_seen", str, w, ""), opt(d, "run_id", str, w)))
        le = opt(o, "last_event", dict, "")
        return cls(schema=opt(o, "schema", int, "", 1), job=opt(o, "job", str, ""), status=status(o, ""),
                   manifest=opt(o, "manifest", str, ""), attempts=attempts, stages=stages,
                   events=opt(o, "events", int, "", 0),
                   last_event=None if le is None else LastEvent(opt(le, "seq", int, "last_event"),
                                                                opt(le, "event", str, "last_event"),
                                                                opt(le, "time", str, "last_event"),
                                                                opt(le, "stage", str, "last_event")))


def replay(events: list[JobEvent]) -> JobView:
    """The job's state after these events (pure).

    | event | what changes |
    |---|---|
    | run-started | a new attempt; the job, its manifest, its stages (pending) named; status running |
    | any later event | the last attempt's last_seen |
    | preflight-passed / -failed | preflight (ok, reasons) |
    | inventory-OUTCOME | inventory (outcome, exit, reasons, the snapshot's hash) |
    | stage-started | the stage running, one more run, its head, digest, log, process group and boot |
    | stage-passed / -failed / -stopped / -interrupted | the stage's status and end (passed: commit, outputs) |
    | result-committed | result (outcome, exit, commit) |
    | job-ended | the job's status: its outcome |
    """
    st = JobView(events=len(events))
    for ev in events:
        kind, t = ev.event, ev.time
        st.last_event = LastEvent(ev.seq, kind.value, t, ev.stage)
        if kind is Event.RUN_STARTED:
            st.job = ev.job
            st.manifest = ev.inputs.get("manifest")
            st.status = Status.RUNNING
            st.attempts.append(Attempt(len(st.attempts) + 1, t, t, ev.run_id))
            for name in ev.stages:
                st.stages.setdefault(name, StageView())
        elif st.attempts:
            st.attempts[-1].last_seen = t
        if kind in (Event.PREFLIGHT_PASSED, Event.PREFLIGHT_FAILED):
            st.preflight = PreflightView(kind is Event.PREFLIGHT_PASSED, list(ev.reasons), t)
        elif kind.inventory is not None:
            st.inventory = InventoryView(kind.inventory, ev.exit, list(ev.reasons), t,
                                         ev.inputs.get("snapshot"))
        elif kind.stage and ev.stage is not None:
            s = st.stages.setdefault(ev.stage, StageView())
            if kind is Event.STAGE_STARTED:
                s.status, s.started, s.ended, s.exit, s.runs = Status.RUNNING, t, None, None, s.runs + 1
                s.head_at_start, s.digest = ev.inputs.get("head"), ev.inputs.get("stage")
                s.log, s.pgid, s.boot = ev.log, ev.pgid, ev.boot
            elif kind is Event.STAGE_PASSED:
                s.status, s.ended, s.exit = Status.PASSED, t, 0
                s.commit, s.outputs = ev.commit, list(ev.outputs)
            elif kind is Event.STAGE_FAILED:
                s.status, s.ended, s.exit = Status.FAILED, t, ev.exit
            elif kind is Event.STAGE_STOPPED:
                s.status, s.ended, s.exit = Status.STOPPED, t, ev.exit
            elif kind is Event.STAGE_INTERRUPTED:
                s.status, s.ended = Status.INTERRUPTED, t
        elif kind is Event.RESULT_COMMITTED:
            st.result = ResultView(ev.outcome, ev.exit, ev.commit, t)
        elif kind is Event.JOB_ENDED:
            st.status = Status(str(ev.outcome))
    return st


@dataclass(frozen=True)
class Clock:
    """`clock.json`: the running attempt's last heartbeat (its number, a Unix time)."""

    attempt: int
    last_seen_ts: float


def used_seconds(state: JobView, clock: Clock | None = None) -> float:
    """Wall-clock seconds spent across every attempt (a killed one up to its last heartbeat)."""
    total = 0.0
    attempts = state.attempts
    for i, a in enumerate(attempts):
        if not a.started or not a.last_seen:
            continue
        end = parse_iso(a.last_seen)
        if clock and i == len(attempts) - 1 and clock.attempt == a.n:
            end = max(end, clock.last_seen_ts)
        total += max(0.0, end - parse_iso(a.started))
    return total


@dataclass
class JobState:
    """The state folder of one job, held under a lock by one `nev job run` at a time."""

    folder: Path
    events: list[JobEvent] = field(default_factory=list)
    state: JobView = field(default_factory=JobView)
    _lock_fd: int | None = None

    @classmethod
    def open(cls, folder: Path, lock: bool = True) -> JobState:
        folder.mkdir(parents=True, exist_ok=True)
        js = cls(folder)
        if lock:
            fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EAGAIN, errno.EACCES):
                    raise NevError(f"{folder}: another `nev job run` holds this job's state; "
                                   "wait for it or stop it first") from None
                raise
            js._lock_fd = fd
        path = folder / EVENTS
        text = jsonfile.read_text(path, "event log", "") if os.path.lexists(path) else ""
        js.events, size = valid_prefix(text, str(path))
        if lock and len(text.encode()) != size:
            with path.open("r+b") as f:  # drop a torn or broken tail before appending
                f.truncate(size)
        js.state = replay(js.events)
        return js

    @classmethod
    def read(cls, folder: Path) -> JobState:
        """Read without the lock (for `nev job status`)."""
        return cls.open(folder, lock=False)

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def record(self, event: Event, **fields: Any) -> JobEvent:
        """Append one transition (flushed to disk) and rewrite state.json."""
        prev = line_hash(self.events[-1].line) if self.events else ""
        ev = {"seq": len(self.events) + 1, "time": now_iso(), "event": Event(event).value, **fields,
              "prev": prev}
        line = json.dumps(ev, sort_keys=True)
        with (self.folder / EVENTS).open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        rec = JobEvent.from_json(ev, str(self.folder / EVENTS), line)
        self.events.append(rec)
        self.state = replay(self.events)
        self.write_state()
        return rec

    def write_state(self) -> None:
        out = self.state.to_json()
        out["used_s"] = round(used_seconds(self.state, self.clock()), 1)
        jsonfile.write_atomic(self.folder / STATE, out)

    def clock(self) -> Clock | None:
        """The heartbeat, or None when there is none or it does not read (it only adds time)."""
        try:
            data = jsonfile.load(self.folder / CLOCK, "clock file")
        except ConfigError:
            return None
        if not isinstance(data, dict):
            return None
        n, ts = data.get("attempt"), data.get("last_seen_ts", 0.0)
        if not isinstance(n, int) or isinstance(n, bool) or isinstance(ts, bool) \
                or not isinstance(ts, int | float):
            return None
        return Clock(n, float(ts))

    def heartbeat(self) -> None:
        if self.state.attempts:
            jsonfile.write_atomic(self.folder / CLOCK, {"attempt": self.state.attempts[-1].n,
                                                        "last_seen_ts": time.time()})

    def used_s(self) -> float:
        return used_seconds(self.state, self.clock())

    def count(self, event: Event, stage: str | None = None) -> int:
        return sum(1 for e in self.events if e.event is event and (stage is None or e.stage == stage))
