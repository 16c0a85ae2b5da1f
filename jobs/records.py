"""What the dev box remembers of its jobs: `NEV_STATE_DIR/job-results.json` (submissions, sends, outcomes).

Read and written under a lock (`job-results.json.lock`), atomically, so a tick and a
submission never drop each other's entries. The file is read into typed records (`Records`, one
`JobRecord` per job) with every field checked: a file that is not JSON, or has a field of the
wrong kind, is refused with one line naming the file and the field, and left as it is (never read
as empty and written back over). Fields this version does not know are kept as they are.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from jobs.manifest import name_problem
from lanes.base import jsonfile, settings
from lanes.base.jsonfile import Fields

SCHEMA = 1


class JobStatus(StrEnum):
    """Where a job stands for this box: sent (and maybe resent), then landed, failed or not landed."""

    SUBMITTED = "submitted"
    RESENT = "resent"
    LANDED = "landed"
    FAILED = "failed"
    NOT_LANDED = "not-landed"

    @property
    def final(self) -> bool:
        return self in (JobStatus.LANDED, JobStatus.FAILED, JobStatus.NOT_LANDED)


@dataclass
class JobRecord:
    """One job as this box submitted and polled it."""

    job: str
    status: JobStatus = JobStatus.SUBMITTED
    sends: int = 0                      # submissions (`nev job submit`)
    resends: int = 0                    # the poller's resends (exit 3 or 7, a cut-off), not counted as sends
    cutoffs: int = 0                    # runs cut off (the lane or its Dagu restarted mid-run): resent once
    spec: str | None = None
    manifest: str | None = None
    tip: str | None = None              # the job branch's commit as pushed
    run_id: str | None = None           # the Dagu run of the last send
    lane: int | None = None             # --lane of the submission (None: the default lane)
    lane_label: str | None = None
    submitted_at: str | None = None
    polled_at: str | None = None
    first_stage_at: str | None = None   # when the job's first stage started on the lane (its result says)
    params: dict[str, str] = field(default_factory=dict)   # the run's parameters (nothing secret)
    result: str | None = None           # the result commit once one is on the forge
    exit: int | None = None             # the result's exit code
    outcome: str | None = None          # the result's outcome (passed, failed, stopped, not-run)
    why: str | None = None              # the last landing's reason
    key_sha256: str | None = None       # the digest of the job's own gateway key (jobs/jobkeys.py), never the key
    extra: dict[str, object] = field(default_factory=dict)    # fields this version does not know

    @classmethod
    def from_json(cls, f: Fields, obj: Any, where: str) -> JobRecord:
        o = f.obj(obj, where)
        raw_status = f.get(o, "status", str, where, required=False, default=JobStatus.SUBMITTED.value)
        try:
            status = JobStatus(raw_status)
        except ValueError:
            raise f.fail(f"{where}.status", f"is {raw_status!r}, not one of "
                         f"{', '.join(s.value for s in JobStatus)}") from None
        for key in ("params", "sends", "resends", "cutoffs", "status"):
            if key in o and o[key] is None:     # nev leaves a field out, never writes null
                raise f.fail(f"{where}.{key}", "is null; leave it out or give a value")
        params = f.get(o, "params", dict, where, required=False, default={})
        for k, v in params.items():
            if not isinstance(v, str):
                raise f.fail(f"{where}.params.{k}", "must be a string")

        def opt(key: str, kind: type) -> Any:
            return f.get(o, key, kind, where, required=False)

        def count(key: str) -> int:
            v = f.get(o, key, int, where, required=False, default=0)
            if v < 0:
                raise f.fail(f"{where}.{key}", f"must be a whole number >= 0, not {v}")
            return int(v)

        def when(key: str) -> str | None:
            v = opt(key, str)
            if v is not None:
                try:
                    dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
                except ValueError:
                    raise f.fail(f"{where}.{key}", f"is {v[:40]!r}, not a time (ISO 8601, as nev writes it)") from None
            return v

        lane = opt("lane", int)
        if lane is not None and lane < 0:
            raise f.fail(f"{where}.lane", f"must be a lane index >= 0, not {lane}")

        known = {x.name for x in fields(cls)} - {"extra"}
        return cls(job=f.get(o, "job", str, where), status=status,
                   sends=count("sends"), resends=count("resends"), cutoffs=count("cutoffs"),
                   spec=opt("spec", str), manifest=opt("manifest", str), tip=opt("tip", str),
                   run_id=opt("run_id", str), lane=lane, lane_label=opt("lane_label", str),
                   submitted_at=when("submitted_at"), polled_at=when("polled_at"),
                   first_stage_at=when("first_stage_at"),
                   params=dict(params), result=opt("result", str), exit=opt("exit", int),
                   outcome=opt("outcome", str), why=opt("why", str), key_sha256=opt("key_sha256", str),
                   extra={k: v for k, v in o.items() if k not in known})

    def to_json(self) -> dict[str, object]:
        """The record as the file holds it: fields with no value left out."""
        out: dict[str, object] = {x.name: getattr(self, x.name) for x in fields(self)
                               if x.name != "extra" and getattr(self, x.name) is not None}
        out["status"] = self.status.value
        if not self.cutoffs:    # newer than the file format's first fields: absent until a cut-off
            del out["cutoffs"]
        return {**out, **self.extra}


@dataclass
class Records:
    """The whole file: every job by name, and when the poller last ticked."""

    jobs: dict[str, JobRecord] = field(default_factory=dict)
    last_poll: str | None = None
    schema: int = SCHEMA
    extra: dict[str, object] = field(default_factory=dict)   # top-level keys this version does not know

    @classmethod
    def from_json(cls, f: Fields, data: Any) -> Records:
        top = f.obj(data, "(top level)")
        schema = f.get(top, "schema", int, "", required=False, default=SCHEMA)
        if schema != SCHEMA:
            raise f.fail("schema", f"is {schema}; this nev reads schema {SCHEMA}")
        jobs = f.get(top, "jobs", dict, "", required=False, default={})
        recs = {}
        for name, raw in jobs.items():
            why = name_problem(name)
            if why:       # the key names job/NAME, result/NAME and a state folder: no path, no bad ref
                raise f.fail(f"jobs.{name}", f"is not a job name: it {why}")
            rec = JobRecord.from_json(f, raw, f"jobs.{name}")
            if rec.job != name:
                raise f.fail(f"jobs.{name}.job", f"is {rec.job!r}, not the entry's name {name!r}")
            recs[name] = rec
        last_poll = f.get(top, "last_poll", str, "", required=False)
        if last_poll is not None:
            try:
                dt.datetime.fromisoformat(last_poll.replace("Z", "+00:00"))
            except ValueError:
                raise f.fail("last_poll", f"is {last_poll[:40]!r}, not a time (ISO 8601)") from None
        return cls(jobs=recs, last_poll=last_poll, schema=schema,
                   extra={k: v for k, v in top.items() if k not in ("schema", "jobs", "last_poll")})

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"schema": self.schema, "jobs": {n: r.to_json() for n, r in self.jobs.items()}}
        if self.last_poll is not None:
            out["last_poll"] = self.last_poll
        return {**out, **self.extra}

    def job(self, name: str) -> JobRecord:
        """The record of `name`, made (a result seen with no submission of this box) when missing."""
        return self.jobs.setdefault(name, JobRecord(job=name))


def path(environ: Mapping[str, str] | None = None) -> Path:
    return settings.path(settings.STATE_DIR, environ) / "job-results.json"


@contextmanager
def submitting(name: str, environ: Mapping[str, str] | None = None) -> Iterator[None]:
    """Held by `nev job submit NAME` from its start to its record: a second submission of the same
    name while one runs is refused at once (both would start a Dagu run; the record keeps one)."""
    from lanes.base.errors import NevError

    d = settings.path(settings.STATE_DIR, environ) / "submitting"
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise NevError(f"job {name}: another `nev job submit` of it is running ({d / name}.lock); "
                           "wait for it, then see `nev job status`") from None
        yield
    finally:
        os.close(fd)


def load(p: Path) -> Records:
    """The records of file `p` (none when it does not exist); ConfigError naming the file and the
    field when it is not JSON or a field is bad."""
    if not p.exists():
        return Records()
    return Records.from_json(Fields(p), jsonfile.load(p, "job records file"))


def read(environ: Mapping[str, str] | None = None) -> Records:
    """The records as they are now, without the lock (for `nev job status`)."""
    return load(path(environ))


@contextmanager
def locked(environ: Mapping[str, str] | None = None) -> Iterator[Records]:
    """The records, held under the lock; written back (atomically) when the block ends without error.
    A corrupt file is refused before the block runs, and left as it is; what the block wrote is
    checked as a reader will check it before it reaches the file."""
    p = path(environ)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(p) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        recs = load(p)
        yield recs
        data = recs.to_json()
        Records.from_json(Fields(p), data)
        jsonfile.write_atomic(p, data, mode=0o600)
    finally:
        os.close(fd)
