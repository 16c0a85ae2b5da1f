"""`nev job status NAME --follow`: a job's stages and its running stage's log, read from its lane
over one connection kept open (`jobs/laneread.py`), a read about every second of only the bytes
after those already seen (`Follower`, pure but for its caller's reads; `follow` drives it).
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobs.laneread import Got, LaneReader, Reply
from jobs.lanestate import (
    EVENTS_CAP,
    LaneJob,
    Where,
    current_stage,
    events_of,
    this_run,
)
from jobs.state import EVENTS, Event, JobEvent, JobView, Status, replay
from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from lanes.base.mask import mask

if TYPE_CHECKING:
    from lanes.base.ssh import Connection

POLL_S = 1.0  # --follow: one read a second
GIVE_UP_S = 60.0  # --follow: a lane that does not answer for this long ends it (exit 3)
STALE_S = 120.0  # --follow: a running job whose state has not changed for this long: no runner
TAIL_BYTES = 16384  # --follow: what is read of a running stage's log at the start ...
TAIL_LINES = 10  # ... and how many of its last lines are shown
CAP = 1 << 20  # at most this much of one log per read (the rest comes with the next)
LONG_LINE = 1 << 16  # a log line longer than this (no newline yet) is shown as it stands

# A job's exit when its job-ended event names none (jobs/runner.py's codes).
OUTCOME_EXIT = {
    Status.PASSED: Exit.OK,
    Status.FAILED: Exit.FAILED,
    Status.STOPPED: Exit.STOPPED,
    Status.NOT_RUN: Exit.UNAVAILABLE,
}


# -- following ------------------------------------------------------------------------------------


def event_line(ev: JobEvent, job: str) -> str | None:
    """The line --follow prints for one new event of the runner's (pure); None: said otherwise."""
    kind = ev.event
    stage = ev.stage
    reasons = "; ".join(str(r.get("message")) for r in ev.reasons)
    lines = {
        Event.RUN_STARTED: f"job {job}: attempt started (run {ev.run_id or '-'})",
        Event.PREFLIGHT_FAILED: f"requirements: unmet: {reasons}",
        Event.INVENTORY_TRANSIENT: f"inventory: not ready: {reasons}",
        Event.INVENTORY_PERMANENT: f"inventory: refused: {reasons}",
        Event.STAGE_STARTED: f"stage {stage}: running",
        Event.STAGE_PASSED: f"stage {stage}: passed",
        Event.STAGE_FAILED: f"stage {stage}: failed (exit {ev.exit})"
        + (f": {ev.reason}" if ev.reason else ""),
        Event.STAGE_STOPPED: f"stage {stage}: stopped by {ev.reason or 'a signal'}",
        Event.STAGE_INTERRUPTED: f"stage {stage}: cut short by an earlier attempt; "
        "it reruns from its start",
        Event.JOB_ENDED: f"job {job}: {ev.outcome} (exit {ev.exit})",
    }
    line = lines.get(kind)
    return f"== {line}" if line else None


def ended_exit(events: list[JobEvent], view: JobView) -> int:
    """The job's own exit: its job-ended event's, else its outcome's."""
    for ev in reversed(events):
        if ev.event is Event.JOB_ENDED and ev.exit is not None:
            return ev.exit
    return int(OUTCOME_EXIT.get(view.status, Exit.FAILED))


@dataclass
class LogTail:
    """One stage's log being followed: the bytes seen (`offset`; negative: its last bytes first)."""

    stage: str
    path: str
    offset: int
    ino: int | None = None
    pending: bytes = b""
    ended: bool = False  # the stage ended: drained once a read reaches the file's end
    lines: int | None = 0  # whole lines taken from the file's start (None: began at a tail)
    skip: int = 0  # lines of the archived copy already shown from the lane's own file


@dataclass
class Follower:
    """--follow's state between reads; `requests` says what to read, `take` what to print, and
    the job's exit once it ended and its logs are drained (pure: the caller reads)."""

    where: Where
    ev_offset: int = 0
    ev_ino: int | None = None
    ev_text: bytes = b""
    events: list[JobEvent] = field(default_factory=list)
    live: bool = False  # the state is of the run this box sent, and was shown
    logs: dict[str, LogTail] = field(default_factory=dict)
    shown_log: str | None = None
    said: str | None = None  # the last waiting line (said once)
    asked: list[str] = field(default_factory=list)
    seen: dict[str, tuple[int | None, int]] = field(
        default_factory=dict
    )  # log path: (inode, offset)
    held: list[str] = field(default_factory=list)
    archive: str | None = None  # the run's archived copy, read once its folder was cleaned up

    def requests(self) -> list[tuple[str, int, int]]:
        self.asked = list(self.logs)
        logs = [(self._path(self.logs[s].path), self.logs[s].offset, CAP) for s in self.asked]
        if self.archive is not None:
            events = posixpath.join(self.archive, EVENTS)
            return [(events, self.ev_offset, EVENTS_CAP), (events, 0, 0), *logs]
        reqs = [(self.where.events, self.ev_offset, EVENTS_CAP), (self.where.clock, 0, 0)]
        if self.where.archived:
            reqs.append((self.where.archived, 0, 0))
        return reqs + logs

    def _path(self, log: str) -> str:
        """A stage log's path on the lane: in the archive (`jobs/archive.py`'s `logs/<name>`)
        once the run's folder is gone."""
        if self.archive is None:
            return log
        return posixpath.join(self.archive, "logs", posixpath.basename(log))

    def _to_archive(self, marker: str) -> list[str]:
        """The run's folder was cleaned up (passed, published, archived) between two reads: the
        rest is read from its archived copy, whose lines are the folder's, scrubbed one by one
        (the events and each log's lines already shown are counted, not re-read)."""
        w = self.where
        self.archive = posixpath.join(posixpath.dirname(marker), str(w.run_id))
        self.ev_offset, self.ev_ino, self.ev_text = 0, None, b""
        out = [
            f"== job {w.job}: its folder on {w.label()} is cleaned up (published and archived); "
            f"the rest from {self.archive}"
        ]
        for stage, t in list(self.logs.items()):
            if t.lines is None:  # begun at a tail: where it stood in the file is not known
                out.append(f"== log of stage {stage}: the rest is in {self._path(t.path)}")
                del self.logs[stage]
                continue
            t.skip, t.lines, t.offset, t.ino, t.pending = t.lines, 0, 0, None, b""
        return out

    def _reset(self) -> None:
        self.ev_offset, self.ev_ino, self.ev_text, self.events = 0, None, b"", []
        self.live, self.logs, self.held = False, {}, []

    def _wait(self, line: str) -> list[str]:
        if self.said == line:
            return []
        self.said = line
        return [line]

    def take(self, reply: Reply) -> tuple[list[str], int | None, bool]:
        """(lines to print, the job's exit once it is over, read again at once)."""
        marker = reply.files[2] if self.where.archived and self.archive is None else None
        logs = dict(zip(self.asked, reply.files[3 if marker else 2 :], strict=True))
        got = self._events(reply.files[0], marker)
        if not isinstance(got, list):
            return got
        new = got
        w = self.where
        view = replay(self.events)
        out_events: list[str] = []
        again = False
        first_look = not self.live
        held: list[str] = []
        if first_look:
            self.live = True
            out_events += LaneJob(w, view, reply.now).summary().lines(w.job)
            cur = current_stage(view)
            if view.status in (Status.RUNNING, Status.PENDING) and cur and cur[1].log:
                self.logs[cur[0]] = LogTail(cur[0], cur[1].log, -TAIL_BYTES)
                again = True
        else:
            held, self.held = self.held, []  # what came after a log not read then: after it
            holding = False
            for e in new:
                (self.held if holding else out_events).extend(
                    x for x in [event_line(e, w.job)] if x
                )
                if self._stage_event(e):
                    again = holding = True
        out_logs: list[str] = []
        for stage, one in logs.items():
            t = self.logs.get(stage)
            if t is not None:
                out_logs += self._log(t, one)
        out_events = held + out_events
        if view.status in (Status.RUNNING, Status.PENDING):
            quiet = reply.now - max(reply.files[0].mtime, reply.files[1].mtime)
            if quiet > STALE_S:  # the runner heartbeats every few seconds while a stage runs
                out_events.append(
                    f"== no sign of the runner on {w.label()} for {quiet:.0f} s: the lane or its "
                    f"Dagu restarted under it? `nev job poll` resends a run cut off"
                )
                return out_logs + out_events, Exit.UNAVAILABLE, False
            return out_logs + out_events, None, again
        for t in self.logs.values():
            t.ended = True
        if self.logs:
            return out_logs + out_events, None, True  # their last lines first
        if first_look:  # over before we looked: the lane's view, then its end
            out_events += [x for x in (event_line(e, w.job) for e in self.events[-1:]) if x]
        return out_logs + out_events, ended_exit(self.events, view), False

    def _events(
        self, ev: Got, marker: Got | None
    ) -> list[JobEvent] | tuple[list[str], int | None, bool]:
        """The new events of this run (a list), or what `take` answers without them."""
        w = self.where
        if ev.error:
            raise NevError(f"cannot read {w.events} on {w.label()}: {ev.error}")
        if ev.missing:
            if marker is not None and not marker.missing and w.archived:
                return self._to_archive(w.archived), None, True
            if self.archive is not None:
                raise NevError(
                    f"job {w.job}: its archived events {posixpath.join(self.archive, EVENTS)} "
                    f"are gone from {w.label()}; "
                    f"`nev job status {w.job}` shows its record"
                )
            self._reset()
            return (
                self._wait(
                    f"== waiting for job {w.job}'s state on {w.label()} (queued or preparing: "
                    f"{w.state})"
                ),
                None,
                False,
            )
        if self.ev_ino is not None and (ev.ino != self.ev_ino or ev.start != self.ev_offset):
            # a new folder (a new submission), or a file shorter than what was seen: read it anew
            self._reset()
            return [], None, True
        self.ev_ino = ev.ino
        complete = ev.data[: ev.data.rfind(b"\n") + 1]  # a line still being written: next time
        self.ev_text += complete
        self.ev_offset += len(complete)
        every = events_of(self.ev_text, f"{w.label()}:{w.events}") if complete else self.events
        if len(every) < len(self.events):  # rewritten under us: read it again
            self._reset()
            return [], None, True
        new, self.events = every[len(self.events) :], every
        if not self.events:
            return (
                self._wait(f"== waiting for job {w.job}'s first event on {w.label()} ({w.events})"),
                None,
                False,
            )
        view = replay(self.events)
        if not this_run(view, w.run_id):
            self.live, self.logs = False, {}
            run = view.attempts[-1].run_id if view.attempts else None
            return (
                self._wait(
                    f"== {w.label()} holds run {run or '-'} of {w.job} ({view.status.value}); "
                    f"waiting for run {w.run_id} to start"
                ),
                None,
                False,
            )
        return new

    def _stage_event(self, e: JobEvent) -> bool:
        """A stage's log followed from its start, or marked ended; True: a log to read at once."""
        kind, stage = e.event, e.stage
        if kind is Event.STAGE_STARTED and e.log is not None and stage is not None:
            ino, offset = self.seen.get(e.log, (None, 0))  # a rerun appends to its log
            self.logs[stage] = LogTail(stage, e.log, offset, ino)
            return True
        if kind.stage and stage in self.logs:
            self.logs[stage].ended = True
        return False

    def _log(self, t: LogTail, got: Got) -> list[str]:
        """The lines of one log read; the tail dropped once its stage ended and it is drained."""
        if got.missing or got.error:
            if t.ended:
                del self.logs[t.stage]
            return [f"== log of stage {t.stage}: {got.error}"] if got.error else []
        if t.ino is not None and got.ino != t.ino:  # another file: from its start
            t.offset, t.ino, t.pending = 0, got.ino, b""
            return []
        data = got.data
        if t.offset < 0 and got.start > 0:  # a tail: from the first whole line
            data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
            t.lines = None
        elif t.offset >= 0 and got.start != t.offset:  # shorter than what was seen: anew
            t.pending, t.lines = b"", None
        first = t.offset < 0
        t.ino, t.offset = got.ino, got.start + len(got.data)
        self.seen[t.path] = (t.ino, t.offset)
        parts = (t.pending + data).split(b"\n")
        t.pending = parts.pop()
        if t.lines is not None:
            t.lines += len(parts)
        if len(t.pending) > LONG_LINE:
            parts.append(t.pending)
            t.pending, t.lines = b"", None
        if t.skip:  # the archived copy's lines already shown from the lane's own file
            shown, t.skip = min(t.skip, len(parts)), max(0, t.skip - len(parts))
            parts = parts[shown:]
        drained = t.ended and got.start + len(got.data) >= got.size
        if drained:
            if t.pending:
                parts.append(t.pending)
            del self.logs[t.stage]
        if first:
            parts = parts[-TAIL_LINES:]
        out = []
        if parts and self.shown_log != t.stage:
            self.shown_log = t.stage
            out.append(f"== log of stage {t.stage} ({self.where.label()}: {t.path})")
        return out + [mask(p.decode("utf-8", "replace").rstrip("\r")) for p in parts]


def follow(
    w: Where, say: Callable[[str], None], poll_s: float = POLL_S, give_up_s: float = GIVE_UP_S
) -> int:
    """`nev job status NAME --follow`: the job's stages and its running stage's log, read over one
    connection kept open, until the job ends; its exit (`ended_exit`). A lane that does not answer
    at the start is NevError; one that stops answering is tried again each `poll_s`, for at most
    `give_up_s` (then exit 3)."""
    from lanes.base.ssh import link_errors

    failures: tuple[type[BaseException], ...] = (NevError, *link_errors())
    f = Follower(w)
    conn: Connection | None = None
    reader: LaneReader | None = None
    last_ok: float | None = None
    down: str | None = None
    try:
        while True:
            began = time.monotonic()
            try:
                if conn is None or reader is None:
                    conn = w.lane.connect()
                    reader = LaneReader(conn)
                reply = reader.read(f.requests())
            except failures as e:
                why = mask(str(e) or type(e).__name__)
                if conn is not None:
                    conn.close()
                conn = reader = None
                if last_ok is None:  # never answered: said by the caller, with the record
                    raise NevError(why, Exit.UNAVAILABLE) from None
                if time.monotonic() - last_ok > give_up_s:
                    raise NevError(
                        f"{w.label()} unreachable for {give_up_s:.0f} s ({why}); the job may "
                        f"still run: `nev job status {w.job}` later",
                        Exit.UNAVAILABLE,
                    ) from None
                if down is None:
                    say(f"== {w.label()} unreachable: {why}; trying again")
                down = why
                time.sleep(poll_s)
                continue
            if down is not None:
                say(f"== {w.label()} answers again")
                down = None
            last_ok = time.monotonic()
            lines, code, again = f.take(reply)
            for line in lines:
                say(line)
            if code is not None:
                return code
            if not again:  # a read about every poll_s, start to start
                time.sleep(max(0.0, began + poll_s - time.monotonic()))
    finally:
        if conn is not None:
            conn.close()
