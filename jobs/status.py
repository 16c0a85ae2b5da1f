"""`nev job status [NAME]`: each job's stage states, from its state folder (or what the poller recorded)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jobs import records
from jobs.lanestate import LaneSummary
from jobs.state import (
    STATE,
    Clock,
    JobState,
    JobView,
    PreflightView,
    ResultView,
    used_seconds,
)
from lanes.base import jsonfile, settings
from lanes.base.errors import NevError, UsageError
from lanes.base.exitcodes import Exit
from lanes.base.mask import mask
from lanes.base.ui import emit_json


def jobs_folder(environ: Mapping[str, str] | None = None) -> Path:
    base = settings.path(settings.STATE_DIR, environ)
    return base / "jobs"


@dataclass
class JobSummary:
    """What a person reads of a job (`nev job status`): from its state folder (`of_state`), or from
    this box's submission record when the state lives on the lane (`of_record`, `resends` set),
    with, for a job in flight asked for by name, its lane's view (`lane`: `LaneSummary`, or why
    the lane could not be read)."""

    job: str | None
    status: str
    attempts: int
    used_s: float = 0.0
    stages: dict[str, str] = field(default_factory=dict)
    preflight: PreflightView | None = None
    inventory: str | None = None
    result: ResultView | str | None = None    # the state's result; a record's: its result commit
    exit: int | None = None
    why: str | None = None
    run_id: str | None = None
    resends: int | None = None                 # set: a submission record of this box
    cutoffs: int | None = None
    lane: LaneSummary | str | None = None      # a string: why the lane could not be read

    @classmethod
    def of_state(cls, state: JobView, clock: Clock | None = None) -> JobSummary:
        return cls(job=state.job, status=state.status.value, attempts=len(state.attempts),
                   used_s=round(used_seconds(state, clock), 1),
                   stages={n: s.status.value for n, s in state.stages.items()},
                   preflight=state.preflight,
                   inventory=state.inventory.outcome if state.inventory else None,
                   result=state.result)

    @classmethod
    def of_record(cls, rec: records.JobRecord) -> JobSummary:
        return cls(job=rec.job, status=rec.status.value, attempts=rec.sends, result=rec.result,
                   exit=rec.exit, why=rec.why, run_id=rec.run_id, resends=rec.resends,
                   cutoffs=rec.cutoffs)

    def to_json(self) -> dict[str, object]:
        """`--json`'s row (commit ids cut to 12, `short_commits`): the state's keys, a record's
        with its own; `lane` only for a job in flight asked for by name."""
        result = asdict(self.result) if isinstance(self.result, ResultView) else self.result
        out: dict[str, object] = {
            "job": self.job, "status": self.status, "attempts": self.attempts,
            "used_s": self.used_s, "stages": dict(self.stages),
            "preflight": asdict(self.preflight) if self.preflight else None,
            "inventory": self.inventory, "result": result}
        if self.resends is not None:
            out.update({"exit": self.exit, "why": self.why, "run_id": self.run_id,
                        "resends": self.resends, "cutoffs": self.cutoffs})
        if self.lane is not None:
            out["lane"] = ({"unreachable": self.lane} if isinstance(self.lane, str)
                           else self.lane.to_json())
        return short_commits(out)


COMMIT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
SHORT = 12


def short_commits(obj: Any) -> Any:
    """The same data with every full commit id cut to its first 12 characters (pure): what a person
    reads and passes to git, and short enough that log masking (long letter+digit runs) keeps it."""
    return jsonfile.map_strings(obj, lambda s: s[:SHORT] if COMMIT_ID.fullmatch(s) else s)


def lines(s: JobSummary) -> list[str]:
    if s.resends is not None:  # a submission record of this box (the state lives on the lane)
        out = [f"{s.job}: {s.status}" + (f" (exit {s.exit})" if s.exit is not None else "")
               + f", run {s.run_id or '-'}, {s.attempts} send(s), {s.resends} resend(s)"
               + (f", {s.cutoffs} cut-off(s)" if s.cutoffs else "")]
        if s.why:
            out.append(f"  {s.why}")
        return out
    out = [f"{s.job}: {s.status} ({s.attempts} attempt(s), {s.used_s:.0f} s used)"]
    for name, st in s.stages.items():
        out.append(f"  {name:<20} {st}")
    pf = s.preflight
    if pf and not pf.ok:
        out += [f"  requirements: unmet: {r.get('message')}" for r in pf.reasons]
    if s.inventory and s.inventory not in ("passed", "skipped"):
        out.append(f"  inventory: {s.inventory}")
    return out


def lane_view(rec: records.JobRecord) -> LaneSummary | str:
    """A job in flight as its lane holds it (`jobs.lanestate`), or why it could not be read."""
    from jobs import lanestate

    try:
        got = lanestate.views([lanestate.where(rec)])[rec.job]
    except NevError as e:                     # no lane configured, a bad lanes file
        return mask(e.message)
    return got if isinstance(got, str) else got.summary()


def show(name: str | None, state_dir: Path | None, as_json: bool,
         environ: Mapping[str, str] | None = None, follow: bool = False) -> int:
    """Each job's stage states; with NAME, a job in flight also as its lane holds it. `follow`:
    `follow` below."""
    if follow:
        return follow_job(name, state_dir, as_json, environ)
    folders: list[Path]
    if state_dir is not None:
        folders = [state_dir]
    else:
        root = jobs_folder(environ)
        folders = [root / name] if name else sorted(p for p in root.glob("*") if (p / STATE).exists())
    found = []
    for f in folders:
        if not (f / "events.jsonl").exists():
            if state_dir:
                raise NevError(f"{f}: no job state here; run it with `nev job run` or give --state")
            continue
        js = JobState.read(f)
        found.append(JobSummary.of_state(js.state, js.clock()))
    if state_dir is None:
        seen = {s.job for s in found}     # a set: the records can number tens of thousands
        for job, rec in sorted(records.read(environ).jobs.items()):
            if (name is None or job == name) and job not in seen:
                found.append(JobSummary.of_record(rec))
                if name and not rec.status.final:    # in flight: as its lane holds it too
                    found[-1].lane = lane_view(rec)
    if name and not found:
        raise NevError(f"no job {name}: no state folder under {jobs_folder(environ)} and no submission record")
    if as_json:
        emit_json([s.to_json() for s in found])
    else:
        for s in found:
            print("\n".join(lines(s) + [f"  {x}" for x in lane_text(s)]), flush=True)
        if not found:
            print("no jobs")
    return 0


def lane_text(s: JobSummary) -> list[str]:
    if s.lane is None:
        return []
    if isinstance(s.lane, str):
        return [f"lane unreachable: {s.lane}"]
    return s.lane.lines(s.job or "")


def follow_job(name: str | None, state_dir: Path | None, as_json: bool,
               environ: Mapping[str, str] | None = None) -> int:
    """`nev job status NAME --follow`: a job in flight (submitted or resent, by its record) followed
    on its lane until it ends (`jobs.follow.follow`), exiting with the job's own exit; any other
    job's status shown once, as without --follow (exit 0). A lane that does not answer: the
    record and `lane unreachable: ...`, exit 3."""
    if not name or state_dir is not None or as_json:
        raise UsageError("--follow takes a job NAME, and no --state or --json")
    rec = records.read(environ).jobs.get(name)
    if rec is None or rec.status.final:
        return show(name, None, False, environ)
    from jobs import follow, lanestate

    try:
        w = lanestate.where(rec)
        return follow.follow(w, lambda line: print(line, flush=True))
    except NevError as e:
        if e.exit_code != Exit.UNAVAILABLE:
            raise
        out = lines(JobSummary.of_record(rec)) + [f"  lane unreachable: {mask(e.message)}"]
        print("\n".join(out), flush=True)
        return Exit.UNAVAILABLE
