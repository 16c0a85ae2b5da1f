"""`nev job poll`: the tick. Results on the forge -> `nev land`; exit 3 and 7 resent; 9 and 10 recorded.

Each tick reads every `result/*` branch on the forge and the Dagu run of every job this
box submitted that has no result yet, and `decide` (pure) picks one action per job:

| seen | action |
|---|---|
| result passed | land it through `nev land SPEC SPEC_SHA TIP` (the branch named like the spec is set to the result); after a landing, job/<name> and result/<name> are deleted on the forge |
| result failed / stopped (exit 1, 8, 9, 10) | recorded as failed, never resent |
| no result, run ended with the run step's exit 3 (inventory not ready) | resent, not counted as a send |
| no result, run ended with the publish step's exit 7 | resent, not counted as a send |
| no result, run still queued or running | wait |

`--install` makes the tick tick: a crontab line (or, with `--dagu-home`, a Dagu workflow with
`schedule: "* * * * *"`) running `nev job poll` in this repository with tracks.json ->
specWatch.pollEnv in its environment; `--uninstall` removes it.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from jobs import forge as forge_mod
from jobs import records
from jobs import result as result_mod
from jobs import tracks as tracks_file
from jobs.result import Result
from lanes import crontab
from lanes.errors import NevError
from lanes.gitrun import GitError, Repo
from lanes.mask import mask
from lanes.ui import info

FINAL = ("landed", "failed", "not-landed")
CRON_TAG = "# nev-job-poll"
POLL_WORKFLOW = "nev-job-poll"
NEV_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class RunInfo:
    done: bool
    status: str
    run_exit: str | None = None      # the run step's exit: "0", "3", "9", "-" (killed), None (did not end)
    publish_exit: str | None = None  # the publish step's


@dataclass(frozen=True)
class Action:
    kind: str  # land | resend | failed | wait | done
    why: str


def decide(rec: dict[str, Any] | None, res: Result | None, run: RunInfo | None) -> Action:
    """What the tick does for one job (pure)."""
    if res is not None:
        if rec and rec.get("result") == res.commit and rec.get("status") in FINAL:
            return Action("done", f"{rec['status']} already")
        if res.outcome == "passed":
            return Action("land", f"result {res.commit[:12]} passed")
        return Action("failed", f"result {res.outcome} (exit {res.exit}); not resent")
    if rec is None or rec.get("status") in FINAL:
        return Action("done", "nothing new")
    if run is None:
        return Action("wait", "its run's status is unknown this tick")
    if not run.done:
        return Action("wait", f"run {rec.get('run_id')} is {run.status}")
    if run.run_exit == "3":
        return Action("resend", "inventory not ready (exit 3)")
    if run.publish_exit == "7":
        return Action("resend", "publishing the result failed (exit 7)")
    return Action("failed", f"run {rec.get('run_id')} ended {run.status} without a result "
                            f"(run step exit {run.run_exit}, publish exit {run.publish_exit})")


def read_runs(jobs: dict[str, dict[str, Any]]) -> dict[str, RunInfo]:
    """The Dagu run of each job, read on its lane (a lane that does not answer leaves its jobs waiting)."""
    out: dict[str, RunInfo] = {}
    by_lane: dict[Any, list[str]] = {}
    for name, rec in jobs.items():
        by_lane.setdefault(rec.get("lane"), []).append(name)
    from dagu import api as api_mod
    from dagu import service

    for lane, names in by_lane.items():
        try:
            with service.opened(lane) as ld, ld.api() as api:
                for name in names:
                    st = api.find_run(jobs[name]["run_id"])
                    steps = {s.name: s for s in st.steps}
                    code = {k: (api_mod.step_exit_code(steps[k]) if k in steps and steps[k].done else None)
                            for k in ("run", "publish")}
                    out[name] = RunInfo(st.done, st.status, code["run"], code["publish"])
        except NevError as e:
            info(f"poll: cannot read runs on lane {lane if lane is not None else 'default'}: {e}")
    return out


def resend(rec: dict[str, Any]) -> str:
    from dagu import runs, service
    from jobs.submit import workflow_file

    with service.opened(rec.get("lane")) as ld:
        wf = runs.load_workflow(str(workflow_file()))
        ld.write_if_changed(f"{ld.layout.dags}/{wf.name}.yaml", wf.text)
        with ld.api() as api:
            run_id, _ = runs.submit(api, wf, rec["params"])
    return str(run_id)


def land(repo: Repo, name: str, res: Result, rec: dict[str, Any] | None, forge: forge_mod.Forge,
         environ: Mapping[str, str]) -> tuple[str, str]:
    """(status, why): landed through `nev land`, or not-landed with the reason."""
    spec = res.spec or (rec or {}).get("spec")
    if not spec:
        return "not-landed", "the result names no spec (Nev-Job-Spec); land it by hand"
    spec_sha = repo.git("rev-parse", "--verify", "--quiet", f"refs/heads/main:specs/{spec}.md",
                        check=False).stdout.strip()
    if not spec_sha:
        return "not-landed", f"specs/{spec}.md is not on main; a job lands only against its spec"
    branch = f"refs/heads/{spec}"
    cur = repo.try_rev(branch)
    if cur is not None and cur != res.commit:
        return "not-landed", (f"branch {spec} exists at {cur[:12]} (a track in progress?); "
                              f"not replacing it with result {res.commit[:12]}")
    repo.git("update-ref", branch, res.commit)
    cp = subprocess.run([sys.executable, "-m", "rig.cli", "land", spec, spec_sha, res.commit],
                        cwd=repo.path, env={**environ, "PYTHONPATH": str(NEV_ROOT)},
                        capture_output=True, text=True)
    for line in (cp.stdout + cp.stderr).strip().splitlines():
        info(f"  {line}" if line.startswith("land:") else f"  land: {line}")
    if cp.returncode != 0:
        if repo.try_rev(branch) == res.commit:
            repo.git("update-ref", "-d", branch, res.commit)
        last = (cp.stderr.strip().splitlines() or cp.stdout.strip().splitlines() or [f"exit {cp.returncode}"])[-1]
        return "not-landed", f"nev land exit {cp.returncode}: {mask(last)}"
    forge.delete(repo, f"job/{name}", f"result/{name}")
    repo.git("update-ref", "-d", f"refs/nev/results/{name}", check=False)
    return "landed", f"landed on main ({repo.rev('refs/heads/main')[:12]}); job/{name} and result/{name} deleted"


def poll(repo_path: Path | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    repo = Repo(Repo(repo_path or Path.cwd()).toplevel())
    forge = forge_mod.from_settings(env, repo)
    tips = forge.ls(repo, "result")
    if tips:
        forge.fetch_results(repo)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    failed = 0
    with records.locked_json(env) as data:
        jobs = data["jobs"]
        waiting = {n: r for n, r in jobs.items() if n not in tips and r.get("status") not in FINAL
                   and r.get("run_id")}
        runs = read_runs(waiting) if waiting else {}
        for name in sorted(set(tips) | set(jobs)):
            rec = jobs.get(name)
            res = result_mod.read(repo, f"refs/nev/results/{name}") if name in tips else None
            act = decide(rec, res, runs.get(name))
            if act.kind == "done":
                continue
            rec = jobs.setdefault(name, {"job": name, "sends": 0, "resends": 0, "status": "submitted"})
            rec["polled_at"] = now
            if act.kind == "wait":
                info(f"{name}: waiting: {act.why}")
                continue
            if act.kind == "resend":
                try:
                    rec["run_id"] = resend(rec)
                except NevError as e:
                    info(f"{name}: resend failed: {e}; next tick tries again")
                    continue
                rec["resends"] = int(rec.get("resends", 0)) + 1
                rec["status"] = "resent"
                info(f"{name}: resent ({act.why}), run {rec['run_id']}; not counted as a send")
                continue
            assert res is not None or act.kind == "failed"
            if res is not None:
                rec.update(result=res.commit, exit=res.exit, outcome=res.outcome, run_id=res.run_id or rec.get("run_id"))
            if act.kind == "failed":
                rec["status"] = "failed"
                failed += 1
                info(f"{name}: failed: {act.why}")
                continue
            assert res is not None
            try:
                status, why = land(repo, name, res, rec, forge, env)
            except GitError as e:
                status, why = "not-landed", str(e)
            rec["status"] = status
            rec["why"] = why
            info(f"{name}: {status}: {why}")
        data["last_poll"] = now
    return 1 if failed else 0


# -- the tick's schedule ------------------------------------------------------------------------

def tick_env(repo: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a scheduled tick: this shell's non-secret NEV_* settings, then pollEnv."""
    env = crontab.carried_env(environ)
    env["PYTHONPATH"] = str(NEV_ROOT)
    tf = repo / "tracks.json"
    if tf.exists():
        env.update(tracks_file.load(tf).spec_watch.poll_env)
    return env


def cron_tag(repo: Path) -> str:
    return f"{CRON_TAG} {repo}"


def cron_line(repo: Path, env: Mapping[str, str], log: Path) -> str:
    return crontab.line("* * * * *", repo, env, [sys.executable, "-m", "rig.cli", "job", "poll"], log,
                        cron_tag(repo))


def poll_workflow(repo: Path, env: Mapping[str, str]) -> str:
    doc = {
        "description": f"nev job poll in {repo}, every minute (written by nev job poll --install)",
        "schedule": "* * * * *",
        "maxActiveRuns": 1,
        "histRetentionDays": 7,
        "env": [{k: v} for k, v in sorted(env.items())],
        "steps": [{"name": "poll", "dir": str(repo),
                   "command": f"{shlex.quote(sys.executable)} -m rig.cli job poll"}],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def install(repo_path: Path | None, dagu_home: Path | None, on: bool,
            environ: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    repo = Repo(repo_path or Path.cwd()).toplevel()
    tenv = tick_env(repo, env)
    if dagu_home is not None:
        wf = dagu_home / "dags" / f"{POLL_WORKFLOW}.yaml"
        if on:
            wf.parent.mkdir(parents=True, exist_ok=True)
            wf.write_text(poll_workflow(repo, tenv), encoding="utf-8")
            info(f"installed the tick as the Dagu workflow {wf} (schedule: every minute)")
        elif wf.exists():
            wf.unlink()
            info(f"removed the tick's Dagu workflow {wf}")
        else:
            info(f"no tick workflow at {wf}; nothing to remove")
        return 0
    log = records.path(env).parent / "job-poll.log"
    if not crontab.install(cron_tag(repo), cron_line(repo, tenv, log) if on else None):
        info("the crontab already " + ("has this repository's tick" if on else "has no tick for this repository"))
        return 0
    info(("installed" if on else "removed") + f" the tick's crontab line for {repo} (log {log})")
    return 0
