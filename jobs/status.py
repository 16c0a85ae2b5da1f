"""`nev job status [NAME]`: each job's stage states, from its state folder (or what the poller recorded)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jobs import records
from jobs.state import STATE, JobState, JobView, used_seconds
from lanes.base import jsonfile, settings
from lanes.base.errors import NevError, UsageError
from lanes.base.exitcodes import Exit
from lanes.base.mask import mask
from lanes.base.ui import emit_json


def jobs_folder(environ: Mapping[str, str] | None = None) -> Path:
    base = settings.path(settings.STATE_DIR, environ)
    return base / "jobs"


def summary(state: JobView, clock: dict[str, Any] | None = None) -> dict[str, Any]:
    """The part of a state a person reads (pure)."""
    return {
        "job": state.job,
        "status": state.status.value,
        "attempts": len(state.attempts),
        "used_s": round(used_seconds(state, clock), 1),
        "stages": {n: s.status.value for n, s in state.stages.items()},
        "preflight": asdict(state.preflight) if state.preflight else None,
        "inventory": state.inventory.outcome if state.inventory else None,
        "result": asdict(state.result) if state.result else None,
    }


COMMIT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
SHORT = 12


def short_commits(obj: Any) -> Any:
    """The same data with every full commit id cut to its first 12 characters (pure): what a person
    reads and passes to git, and short enough that log masking (long letter+digit runs) keeps it."""
    return jsonfile.map_strings(obj, lambda s: s[:SHORT] if COMMIT_ID.fullmatch(s) else s)


def lines(s: dict[str, Any]) -> list[str]:
    if "resends" in s:  # a submission record of this box (the state lives on the lane)
        out = [f"{s['job']}: {s['status']}" + (f" (exit {s['exit']})" if s.get("exit") is not None else "")
               + f", run {s.get('run_id') or '-'}, {s['attempts']} send(s), {s['resends']} resend(s)"
               + (f", {s['cutoffs']} cut-off(s)" if s.get("cutoffs") else "")]
        if s.get("why"):
            out.append(f"  {s['why']}")
        return out
    out = [f"{s['job']}: {s['status']} ({s['attempts']} attempt(s), {s['used_s']:.0f} s used)"]
    for name, st in s["stages"].items():
        out.append(f"  {name:<20} {st}")
    pf = s.get("preflight")
    if pf and not pf.get("ok"):
        out += [f"  requirements: unmet: {r['message']}" for r in pf.get("reasons", [])]
    if s.get("inventory") and s["inventory"] not in ("passed", "skipped"):
        out.append(f"  inventory: {s['inventory']}")
    return out


def record_summary(rec: records.JobRecord) -> dict[str, Any]:
    """A submission record of this box as `lines` reads it (pure)."""
    return {"job": rec.job, "status": rec.status.value, "attempts": rec.sends, "used_s": 0.0,
            "stages": {}, "preflight": None, "inventory": None, "result": rec.result,
            "exit": rec.exit, "why": rec.why, "run_id": rec.run_id, "resends": rec.resends,
            "cutoffs": rec.cutoffs}


def lane_view(rec: records.JobRecord) -> dict[str, Any]:
    """A job in flight as its lane holds it (`jobs.lanestate`), or `{"unreachable": why}`."""
    from jobs import lanestate

    try:
        got = lanestate.views([lanestate.where(rec)])[rec.job]
    except NevError as e:                     # no lane configured, a bad lanes file
        return {"unreachable": mask(e.message)}
    return {"unreachable": got} if isinstance(got, str) else got.summary()


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
        found.append(summary(js.state, js.clock()))
    if state_dir is None:
        seen = {s["job"] for s in found}     # a set: the records can number tens of thousands
        for job, rec in sorted(records.read(environ).jobs.items()):
            if (name is None or job == name) and job not in seen:
                found.append(record_summary(rec))
                if name and not rec.status.final:    # in flight: as its lane holds it too
                    found[-1]["lane"] = lane_view(rec)
    if name and not found:
        raise NevError(f"no job {name}: no state folder under {jobs_folder(environ)} and no submission record")
    found = [short_commits(s) for s in found]
    if as_json:
        emit_json(found)
    else:
        for s in found:
            print("\n".join(lines(s) + [f"  {x}" for x in lane_text(s)]), flush=True)
        if not found:
            print("no jobs")
    return 0


def lane_text(s: dict[str, Any]) -> list[str]:
    lane = s.get("lane")
    if not lane:
        return []
    if "unreachable" in lane:
        return [f"lane unreachable: {lane['unreachable']}"]
    from jobs.lanestate import lane_lines

    return lane_lines(lane, s["job"])


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
        out = lines(short_commits(record_summary(rec))) + [f"  lane unreachable: {mask(e.message)}"]
        print("\n".join(out), flush=True)
        return Exit.UNAVAILABLE
