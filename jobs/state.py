"""A job's durable state: `events.jsonl` (append-only transitions) and `state.json` (a view).

Every transition is one line of `events.jsonl`: its sequence number, time, the
event, the stage, the inputs' hashes, the outputs' paths and the hash of the line
before it. The events are the truth; `state.json` is rebuilt from them by `replay`
(a pure function) and written atomically after every event, so a reader never sees
half a file. On open, the valid prefix of the events is kept (a line cut short by a
kill, or one whose chain breaks, ends it; what follows is cut off before the next
append) and the job resumes from the last valid transition.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lanes import jsonfile
from lanes.errors import NevError

EVENTS = "events.jsonl"
STATE = "state.json"
CLOCK = "clock.json"
LOCK = "lock"

# Job outcomes recorded in a result and in state.json `status`.
PASSED, FAILED, NOT_RUN, STOPPED, RUNNING, PENDING = "passed", "failed", "not-run", "stopped", "running", "pending"


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


def valid_prefix(text: str) -> tuple[list[dict[str, Any]], int]:
    """The events of the valid prefix and its length in bytes (of `text` encoded as UTF-8)."""
    events: list[dict[str, Any]] = []
    prev = ""
    size = 0
    for raw in text.splitlines(keepends=True):
        if not raw.endswith("\n"):
            break  # cut short by a kill
        line = raw[:-1]
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            break
        if not isinstance(ev, dict) or ev.get("seq") != len(events) + 1 or ev.get("prev", "") != prev:
            break
        events.append(ev)
        prev = line_hash(line)
        size += len(raw.encode())
    return events, size


def _stage_entry() -> dict[str, Any]:
    return {"status": PENDING, "runs": 0, "started": None, "ended": None, "head_at_start": None,
            "digest": None, "commit": None, "log": None, "exit": None, "pgid": None, "outputs": []}


def replay(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's state after these events (pure)."""
    st: dict[str, Any] = {"schema": 1, "job": None, "status": PENDING, "manifest": None, "attempts": [],
                          "preflight": None, "inventory": None, "stages": {}, "result": None,
                          "events": len(events), "last_event": None}
    for ev in events:
        kind = ev.get("event")
        t = ev.get("time")
        st["last_event"] = {"seq": ev.get("seq"), "event": kind, "time": t, "stage": ev.get("stage")}
        if kind == "run-started":
            st["job"] = ev.get("job")
            st["manifest"] = ev.get("inputs", {}).get("manifest")
            st["status"] = RUNNING
            st["attempts"].append({"n": len(st["attempts"]) + 1, "started": t, "last_seen": t,
                                   "run_id": ev.get("run_id")})
            for name in ev.get("stages", []):
                st["stages"].setdefault(name, _stage_entry())
        elif st["attempts"]:
            st["attempts"][-1]["last_seen"] = t
        if kind in ("preflight-passed", "preflight-failed"):
            st["preflight"] = {"ok": kind == "preflight-passed", "reasons": ev.get("reasons", []), "at": t}
        elif kind and kind.startswith("inventory-"):
            st["inventory"] = {"outcome": kind[len("inventory-"):], "exit": ev.get("exit"),
                               "reasons": ev.get("reasons", []), "at": t,
                               "snapshot": ev.get("inputs", {}).get("snapshot")}
        elif kind and kind.startswith("stage-"):
            s = st["stages"].setdefault(ev["stage"], _stage_entry())
            if kind == "stage-started":
                s.update(status=RUNNING, started=t, ended=None, exit=None, runs=s["runs"] + 1,
                         head_at_start=ev.get("inputs", {}).get("head"),
                         digest=ev.get("inputs", {}).get("stage"), log=ev.get("log"), pgid=ev.get("pgid"))
            elif kind == "stage-passed":
                s.update(status=PASSED, ended=t, exit=0, commit=ev.get("commit"), outputs=ev.get("outputs", []))
            elif kind == "stage-failed":
                s.update(status=FAILED, ended=t, exit=ev.get("exit"))
            elif kind == "stage-stopped":
                s.update(status=STOPPED, ended=t, exit=ev.get("exit"))
            elif kind == "stage-interrupted":
                s.update(status="interrupted", ended=t)
        elif kind == "result-committed":
            st["result"] = {"outcome": ev.get("outcome"), "exit": ev.get("exit"), "commit": ev.get("commit"),
                            "at": t}
        elif kind == "job-ended":
            st["status"] = ev.get("outcome")
    return st


def used_seconds(state: dict[str, Any], clock: dict[str, Any] | None = None) -> float:
    """Wall-clock seconds spent across every attempt (a killed one up to its last heartbeat)."""
    total = 0.0
    attempts = state.get("attempts", [])
    for i, a in enumerate(attempts):
        end = parse_iso(a["last_seen"])
        if clock and i == len(attempts) - 1 and clock.get("attempt") == a["n"]:
            end = max(end, float(clock.get("last_seen_ts", end)))
        total += max(0.0, end - parse_iso(a["started"]))
    return total


@dataclass
class JobState:
    """The state folder of one job, held under a lock by one `nev job run` at a time."""

    folder: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
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
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        js.events, size = valid_prefix(text)
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

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one transition (flushed to disk) and rewrite state.json."""
        prev = line_hash(json.dumps(self.events[-1], sort_keys=True)) if self.events else ""
        ev = {"seq": len(self.events) + 1, "time": now_iso(), "event": event, **fields, "prev": prev}
        line = json.dumps(ev, sort_keys=True)
        with (self.folder / EVENTS).open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.events.append(ev)
        self.state = replay(self.events)
        self.write_state()
        return ev

    def write_state(self) -> None:
        out = dict(self.state)
        out["used_s"] = round(used_seconds(out, self.clock()), 1)
        jsonfile.write_atomic(self.folder / STATE, out)

    def clock(self) -> dict[str, Any] | None:
        try:
            data = json.loads((self.folder / CLOCK).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def heartbeat(self) -> None:
        attempts = self.state.get("attempts") or []
        if attempts:
            jsonfile.write_atomic(self.folder / CLOCK, {"attempt": attempts[-1]["n"], "last_seen_ts": time.time()})

    def used_s(self) -> float:
        return used_seconds(self.state, self.clock())

    def count(self, event: str, stage: str | None = None) -> int:
        return sum(1 for e in self.events if e.get("event") == event and (stage is None or e.get("stage") == stage))
