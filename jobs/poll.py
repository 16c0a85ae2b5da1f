"""The tick's jobs: results on the forge -> `jobs.land.land`; exit 3, 7 resent; 9, 10 recorded.

Each tick reads every `result/*` branch on the forge and the Dagu run of every job this
box submitted that has no result yet, and `decide` (pure) picks one action per job:

| seen | action |
|---|---|
| a result with no record here (another box's job) | ignored: left to its submitter |
| result passed | land it (`jobs.land.land` in this process, as `nev land SPEC SPEC_SHA TIP`; the branch named like the spec is set to the result); after a landing, job/<name> and result/<name> are deleted on the forge while they are still what landed (`clean_up_forge`) |
| result failed / stopped (exit 1, 8, 9, 10) | recorded as failed, never resent |
| no result, run ended with the run step's exit 3 (inventory not ready) | resent, not counted as a send |
| no result, run ended with the publish step's exit 7 | resent, not counted as a send |
| no result, run cut off (a step left running, or the run step ended by a signal: the lane or its Dagu restarted) | resent once (counted under `cutoffs`); cut off a second time: recorded as failed |
| no result, run still queued or running | wait |

The tick (`jobs.tick`) runs this after the approved tracks, under its one lock. The job
records (`jobs.records`) are locked only while they are read and while each outcome is
written, never during a landing, so `nev job submit` does not wait for a gate. The tick's
schedule (`nev job poll --install`) is `jobs.tick`'s too.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

from jobs import jobkeys, records
from jobs import land as landing
from jobs import result as result_mod
from jobs.land_gate import INTERRUPTED
from jobs.records import JobRecord, JobStatus
from jobs.result import Result
from lanes import forge as forge_mod
from lanes.base import notify
from lanes.base.errors import NevError
from lanes.base.gitrun import GitError, Repo
from lanes.base.mask import mask
from lanes.base.ui import info


class StepExit(IntEnum):
    """Exits of the job workflow's steps that the tick acts on (docs/exit-codes.md)."""

    INVENTORY_NOT_READY = 3  # the run step: resent, not counted as a send
    PUBLISH_FAILED = 7       # the publish step: resent, not counted as a send


CUTOFF_RESENDS = 1  # a run cut off is resent this many times; the next cut-off is a failure
RUN_ENDED_BY_FAILURE = frozenset({"failed", "partially_succeeded"})


@dataclass(frozen=True)
class RunInfo:
    done: bool
    status: str
    run_exit: int | None = None      # the run step's exit; None: it did not end, or ended without one (killed)
    publish_exit: int | None = None  # the publish step's
    cut_off: str | None = None       # why the run counts as cut off (`cut_off`), None when it does not


def cut_off(status: str, steps: list[tuple[str, str, str]]) -> str | None:
    """Why an ended run of the job workflow counts as cut off, or None (pure). `steps` are
    (name, Dagu's statusLabel, exit code as `dagu.api.step_exit_code` reads it).

    | the run ended (not aborted: a stop is no cut-off) and | cut off? |
    |---|---|
    | a step is still `running` (its process died with the lane's Dagu; Dagu's zombie check ended the run) | yes |
    | the prepare, run or publish step failed with no exit status (a signal ended it) | yes |
    | otherwise (every step ended with an exit status, or never started) | no |
    """
    if status not in RUN_ENDED_BY_FAILURE:
        return None
    for name, st, _code in steps:
        if st == "running":
            return f"step {name} was left running when the run ended {status}"
    for name, st, code in steps:
        if name in ("prepare", "run", "publish") and st == "failed" and code == "-":
            return f"step {name} ended without an exit status (a signal)"
    return None



class Act(StrEnum):
    LAND = "land"
    RESEND = "resend"
    FAILED = "failed"
    WAIT = "wait"
    DONE = "done"


@dataclass(frozen=True)
class Action:
    kind: Act
    why: str
    cut_off: bool = False   # a resend of a run cut off (counted under `cutoffs`)


def _code(x: int | None) -> str:
    return "-" if x is None else str(x)


def decide(rec: JobRecord | None, res: Result | None, run: RunInfo | None) -> Action:
    """What the tick does for one job (pure); the module's table. A result with no record is
    another state folder's (a teammate's box on the same forge): only its submitter lands it."""
    if res is not None and rec is None:
        return Action(Act.DONE, "not submitted from this state folder: left to its submitter")
    if res is not None:
        if rec and rec.result == res.commit and rec.status.final:
            return Action(Act.DONE, f"{rec.status} already")
        if res.outcome == "passed":
            return Action(Act.LAND, f"result {res.commit[:12]} passed")
        return Action(Act.FAILED, f"result {res.outcome} (exit {res.exit}); not resent")
    if rec is None or rec.status.final:
        return Action(Act.DONE, "nothing new")
    if run is None:
        return Action(Act.WAIT, "its run's status is unknown this tick")
    if not run.done:
        return Action(Act.WAIT, f"run {rec.run_id} is {run.status}")
    if run.run_exit == StepExit.INVENTORY_NOT_READY:
        return Action(Act.RESEND, "inventory not ready (exit 3)")
    if run.publish_exit == StepExit.PUBLISH_FAILED:
        return Action(Act.RESEND, "publishing the result failed (exit 7)")
    if run.cut_off:
        if rec.cutoffs >= CUTOFF_RESENDS:
            return Action(Act.FAILED, f"run {rec.run_id} was cut off again ({run.cut_off}) after "
                                      f"{rec.cutoffs} resend(s) of a cut-off run; not resent again")
        return Action(Act.RESEND, f"run {rec.run_id} was cut off: {run.cut_off}", cut_off=True)
    return Action(Act.FAILED, f"run {rec.run_id} ended {run.status} without a result "
                              f"(run step exit {_code(run.run_exit)}, publish exit {_code(run.publish_exit)})")


def read_runs(jobs: dict[str, JobRecord]) -> dict[str, RunInfo]:
    """The Dagu run of each job, read on its lane (a lane that does not answer leaves its jobs waiting)."""
    out: dict[str, RunInfo] = {}
    by_lane: dict[int | None, list[tuple[str, str]]] = {}
    for name, rec in jobs.items():
        if rec.run_id:
            by_lane.setdefault(rec.lane, []).append((name, rec.run_id))
    from dagu import api as api_mod
    from dagu import service

    def code(st: Any) -> int | None:
        c = api_mod.step_exit_code(st) if st is not None and st.done else "-"
        return int(c) if c.isdigit() else None

    for lane, runs in by_lane.items():
        try:
            with service.opened(lane) as ld, ld.api() as api:
                for name, run_id in runs:
                    st = api.find_run(run_id)
                    steps = {s.name: s for s in st.steps}
                    cut = cut_off(st.status, [(s.name, s.status, api_mod.step_exit_code(s)) for s in st.steps]) \
                        if st.done else None
                    out[name] = RunInfo(st.done, st.status, code(steps.get("run")), code(steps.get("publish")), cut)
        except NevError as e:
            info(f"poll: cannot read runs on lane {lane if lane is not None else 'default'}: {e}")
    return out


def resend(rec: JobRecord) -> str:
    from dagu import runs, service
    from jobs.submit import workflow_file

    with service.opened(rec.lane) as ld:
        wf = runs.load_workflow(str(workflow_file()))
        ld.write_if_changed(f"{ld.layout.dags}/{wf.name}.yaml", wf.text)
        with ld.api() as api:
            run_id, _ = runs.submit(api, wf, rec.params)
    return str(run_id)


def land(repo: Repo, name: str, res: Result, rec: JobRecord | None, forge: forge_mod.Forge,
         environ: Mapping[str, str]) -> tuple[JobStatus, str]:
    """(status, why): landed through `jobs.land.land` in this process, or not-landed with the reason."""
    spec = res.spec or (rec.spec if rec else None)
    if not spec:
        return JobStatus.NOT_LANDED, "the result names no spec (Nev-Job-Spec); land it by hand"
    spec_sha = repo.blob("refs/heads/main", f"specs/{spec}.md")
    if spec_sha is None:
        return JobStatus.NOT_LANDED, f"specs/{spec}.md is not on main; a job lands only against its spec"
    branch = f"refs/heads/{spec}"
    cur = repo.try_rev(branch)
    if cur is not None and cur != res.commit:
        return JobStatus.NOT_LANDED, (f"branch {spec} exists at {cur[:12]} (a track in progress?); "
                                      f"not replacing it with result {res.commit[:12]}")
    repo.set_ref(branch, res.commit)
    try:
        # the job's batches are filed under its name (NEV_LEDGER_NAME): its landing announces them
        landing.land(repo.path, spec, spec_sha, res.commit, environ=environ, ledgers=(name,))
    except NevError as e:
        if e.exit_code in INTERRUPTED:
            raise
        repo.delete_ref(branch, res.commit)
        return JobStatus.NOT_LANDED, f"nev land exit {e.exit_code}: {mask(e.message)}"
    kept = clean_up_forge(repo, forge, name, res, rec, environ)
    repo.delete_ref(f"refs/nev/results/{name}")
    main = repo.rev("refs/heads/main")[:12]
    if kept:
        return JobStatus.LANDED, (f"landed on main ({main}); {' and '.join(kept)} kept: it moved since "
                                  "(submitted again while this result landed)")
    return JobStatus.LANDED, f"landed on main ({main}); job/{name} and result/{name} deleted"


def clean_up_forge(repo: Repo, forge: forge_mod.Forge, name: str, res: Result, rec: JobRecord | None,
                   environ: Mapping[str, str]) -> list[str]:
    """After a landing: job/<name> and result/<name> deleted on the forge only while they are what
    landed (a compare-and-swap each), so a submission of the same name made while the result
    landed keeps its branch. job/<name> is what landed when the landed result holds its tip and
    the job was not submitted again since this tick read its record; result/<name> when it is
    still the landed result. The branches kept."""
    with records.locked(environ) as recs:
        seen = rec.sends if rec else 0
        again = name in recs.jobs and recs.jobs[name].sends != seen
    job_tip = None if again else forge.ls(repo, "job").get(name)
    if job_tip is not None and not repo.is_ancestor(job_tip, res.commit):
        job_tip = None
    return forge.delete_if_at(repo, {f"job/{name}": job_tip, f"result/{name}": res.commit})


def revoke_key(name: str, env: Mapping[str, str], sha256: str | None, lane: int | None = None) -> None:
    """The job's own gateway key revoked (`jobs/jobkeys.py`) and its file on the lane deleted: the
    one this tick's record names, so a submission of the same job during the tick keeps its new
    key and file; a failure is said, and the key still expires by itself."""
    if not sha256 or not jobkeys.where(env):
        return
    try:
        jobkeys.revoke(name, env, sha256)
        info(f"{name}: its gateway key revoked")
    except NevError as e:
        info(f"{name}: its gateway key was not revoked ({e}); it expires by itself, or: nev job revoke {name}")
    try:
        jobkeys.drop_key_file(name, lane, sha256)
    except NevError as e:
        info(f"{name}: its key file on the lane was not deleted ({e}); nev job revoke {name} deletes it")


def _write(environ: Mapping[str, str], name: str, seen: JobRecord | None, **outcome: Any) -> bool:
    """This tick's outcome (`JobRecord` fields) written into the job's record under the records
    lock; False, nothing written, when the job was submitted again since this tick read it (`seen`):
    the new submission owns the record."""
    with records.locked(environ) as recs:
        rec = recs.job(name)
        if rec.sends != (seen.sends if seen else 0):
            info(f"{name}: submitted again during this tick; its record is left to the new submission")
            return False
        recs.jobs[name] = dataclasses.replace(rec, **outcome)
        return True


def poll_jobs(repo: Repo, forge: forge_mod.Forge, env: dict[str, str],
              seen: list[dict[str, str]] | None = None) -> int:
    """The jobs' part of the tick (`jobs.tick`): one action per job, each said on one line (and
    added to `seen` as {job, action, why}: `nev job poll --json`); 1 when one failed."""
    def said(name: str, action: str, why: str, line: str) -> None:
        info(line)
        if seen is not None:
            seen.append({"job": name, "action": action, "why": why})

    tips = forge.ls(repo, "result")
    if tips:
        forge.fetch_results(repo)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with records.locked(env) as recs:
        jobs = copy.deepcopy(recs.jobs)
    waiting = {n: r for n, r in jobs.items() if n not in tips and not r.status.final and r.run_id}
    runs = read_runs(waiting) if waiting else {}
    if any(r.done for r in runs.values()):
        # a run that ended after the results were listed published its result meanwhile (the
        # publish step is the run's): list them again, or the job would fail "without a result"
        again = forge.ls(repo, "result")
        if set(again) - set(tips):
            forge.fetch_results(repo)
            tips = again
    failed = 0
    for name in sorted(set(tips) | set(jobs)):
        rec = jobs.get(name)
        res = result_mod.read(repo, f"refs/nev/results/{name}") if name in tips else None
        act = decide(rec, res, runs.get(name))
        if act.kind is Act.DONE:
            continue
        if act.kind is Act.WAIT:
            _write(env, name, rec, polled_at=now)
            said(name, "waiting", act.why, f"{name}: waiting: {act.why}")
        elif act.kind is Act.RESEND:
            assert rec is not None
            try:
                run_id = resend(rec)
            except NevError as e:
                _write(env, name, rec, polled_at=now)
                said(name, "resend failed", str(e),
                     f"{name}: resend failed: {e}; next tick tries again")
                continue
            _write(env, name, rec, polled_at=now, run_id=run_id, status=JobStatus.RESENT,
                   resends=rec.resends + 1, cutoffs=rec.cutoffs + (1 if act.cut_off else 0))
            said(name, "resent", act.why,
                 f"{name}: resent ({act.why}), run {run_id}; not counted as a send")
        else:
            assert res is not None or act.kind is Act.FAILED
            revoke_key(name, env, rec.key_sha256 if rec else None, rec.lane if rec else None)   # the run is over
            found = {} if res is None else dict(
                result=res.commit, exit=res.exit, outcome=res.outcome,
                run_id=res.run_id or (rec.run_id if rec else None), first_stage_at=res.first_stage)
            if act.kind is Act.FAILED:
                if _write(env, name, rec, polled_at=now, status=JobStatus.FAILED, why=act.why,
                          **found):
                    failed += 1
                said(name, "failed", act.why, f"{name}: failed: {act.why}")
                # once per job: a run that ended without a result and then its result (a
                # second tick) fail the same job twice, told once
                if rec is None or rec.status is not JobStatus.FAILED:
                    notify.event(notify.Kind.JOB_FAILED, name, act.why, _ident(res, rec), env)
                continue
            assert res is not None
            _write(env, name, rec, polled_at=now, **found)
            try:
                status, why = land(repo, name, res, rec, forge, env)
            except GitError as e:
                status, why = JobStatus.NOT_LANDED, str(e)
            _write(env, name, rec, status=status, why=why)
            said(name, str(status), why, f"{name}: {status}: {why}")
            if status is not JobStatus.LANDED:   # a landing posts its announcement (land_after)
                notify.event(notify.Kind.JOB_FAILED, name, f"{status}: {why}", _ident(res, rec),
                             env)
    with records.locked(env) as recs:
        recs.last_poll = now
    return 1 if failed else 0


def _ident(res: Result | None, rec: JobRecord | None) -> str:
    """What makes a job's event its own (the notification's key): its result, else its run."""
    return res.commit if res is not None else str(rec.run_id if rec else None)
