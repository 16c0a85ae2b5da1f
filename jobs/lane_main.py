"""The job workflow's steps on the lane: `nev job step STEP ...` (dagu/workflows/job.yaml).

Runs as the lane's own installed nev (`nev lane install`, ~/.local/bin/nev): never a copy of
nev's sources or another machine's packages. The run step is `nev job run`'s runner itself;
the other steps:

- prepare: fetch job/<name> from the forge into the lane mirror, clone it into the job's
  folder (a folder from an earlier run of the same job tip is resumed, one of another tip is
  moved aside, never deleted), install the oracle's npm packages from the share's cache.
- publish: push the result as result/<name> to the forge (exit 7 when that fails; a not-run
  result, exit 3, is kept locally and not published).
- archive: copy logs and state, scrubbed, to the share (also the exit handler).
- cleanup: remove the job's folder only when it passed, was published and archived.

The forge is the URL the lanes reach (`--forge`, the workflow's FORGE parameter: NEV_LANE_GIT_URL
on the dev box), never the dev box's own forward. The credential is the lane's mode-600 token file
(NEV_FORGE_TOKEN_FILE), handed to git by nev's one credential helper (`lanes.agent.git.credential_env`)
through the environment; it is in no argv and no URL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from jobs import archive as archive_mod
from lanes.agent.git import credential_env
from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from lanes.base.gitrun import GitError, Repo, git_env
from lanes.base.mask import register_secret


def say(msg: str) -> None:
    print(archive_mod.scrub(msg), flush=True)


def forge_env() -> dict[str, str]:
    """Git config for forge commands: nev's one credential helper, answering with the token file's
    content (the file Dagu names in NEV_FORGE_TOKEN_FILE); without the file, no helper at all."""
    tf = settings.get(settings.FORGE_TOKEN_FILE)
    token = None
    if tf and Path(tf).is_file():
        token = next(iter(archive_mod.read_secret_files([tf])), None)
        register_secret(token)
    return credential_env(settings.get(settings.FORGE_USER), token)


def job_dir(work: str, job: str) -> Path:
    return Path(work).expanduser() / job


def prepare(job: str, forge: str, mirror: str, work: str, npm_cache: str) -> int:
    w = job_dir(work, job)
    w.mkdir(parents=True, exist_ok=True)
    m = Path(mirror).expanduser()
    if not (m / "HEAD").exists():
        m.mkdir(parents=True, exist_ok=True)
        Repo(m).git("init", "-q", "--bare")
        say(f"made the lane mirror {m}")
    mr = Repo(m, env=forge_env())
    branch = f"job/{job}"
    if forge:
        mr.git("fetch", "-q", "--no-tags", forge, f"+refs/heads/{branch}:refs/heads/{branch}", timeout=600)
    tip = mr.try_rev(f"refs/heads/{branch}")
    if tip is None:
        raise NevError(f"the lane mirror has no branch {branch}; submit the job with `nev job submit`")
    src = w / "src"
    tip_file = w / "job-tip"
    if src.exists():
        old = tip_file.read_text().strip() if tip_file.exists() else ""
        if old == tip:
            say(f"resuming {job}: {src} and its state kept (job tip {tip[:12]})")
        else:
            aside = w.parent / f"{job}.superseded-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}"
            os.rename(w, aside)
            say(f"job/{job} moved from {old[:12] or 'unknown'} to {tip[:12]}: the earlier folder is kept at {aside}")
            w.mkdir(parents=True)
    if not src.exists():
        Repo(w).git("clone", "-q", "--branch", branch, "--single-branch", str(m), str(src))
        say(f"cloned {branch} ({tip[:12]}) from the lane mirror")
    tip_file.write_text(tip + "\n")
    if (src / "package.json").exists():
        cache = Path(npm_cache).expanduser()
        if not cache.is_dir():
            raise NevError(f"the share's npm cache {cache} is missing; fill it before running oracle jobs")
        cp = subprocess.run(["npm", "ci", "--offline", "--no-audit", "--no-fund", "--cache", str(cache)],
                            cwd=src, capture_output=True, text=True)
        if cp.returncode != 0:
            say(cp.stdout[-2000:] + cp.stderr[-2000:])
            raise NevError(f"npm ci from the share's cache failed (exit {cp.returncode})")
        say("installed the oracle's npm packages from the share's cache")
    else:
        say("no package.json: no oracle packages to install")
    return 0


def publish(job: str, forge: str, work: str) -> int:
    src = job_dir(work, job) / "src"
    repo = Repo(src, env=forge_env())
    from jobs import result as result_mod  # the publish and cleanup steps only

    try:
        res = result_mod.read(repo)
    except GitError as e:
        say(f"publish: cannot read the result: {e}")
        return Exit.PUBLISH_FAILED
    if res is None:
        say("publish: the run left no result commit; resend the job")
        return Exit.PUBLISH_FAILED
    if res.outcome == "not-run":
        say(f"publish: not-run result (exit {res.exit}) kept locally, not published")
        return 0
    try:
        repo.git("push", "-q", "--force", forge, f"HEAD:refs/heads/result/{job}", timeout=600)
    except GitError as e:
        say(f"publish: pushing result/{job} failed: {e}")
        return Exit.PUBLISH_FAILED
    (job_dir(work, job) / "published").write_text(f"{res.commit}\n")
    say(f"publish: result/{job} is {res.outcome} (exit {res.exit}) at {res.commit[:12]}")
    return 0


def step_logs_dir(step_logs: str | None, run_log: str | None) -> Path | None:
    """The folder of this run's step logs: beside a step's stdout file, else the run log's newest run_*."""
    if step_logs:
        return Path(step_logs).parent
    if run_log:
        runs = sorted((p for p in Path(run_log).parent.glob("run_*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
        if runs:
            return runs[-1]
    return None


def do_archive(job: str, run_id: str, work: str, share: str, step_logs: str | None, run_log: str | None) -> int:
    from jobs import jobkeys  # the archive step only

    model_key = settings.get(settings.MODEL_KEY_FILE)
    # the job's own gateway key sits beside the lane's (DAGU_HOME/job-keys/<job>.key)
    job_key = jobkeys.lane_key_path(str(Path(model_key).parent), job) if model_key else None
    secrets = archive_mod.read_secret_files([settings.get(settings.FORGE_TOKEN_FILE), model_key, job_key])
    logs = step_logs_dir(step_logs, run_log)
    dest = archive_mod.archive(job, run_id, job_dir(work, job), Path(share), logs, secrets)
    say(f"archived the run's logs to {dest} (marker {archive_mod.marker(Path(share), job, run_id).name})")
    return 0


def cleanup(job: str, run_id: str, work: str, share: str) -> int:
    w = job_dir(work, job)
    if not w.exists():
        say(f"cleanup: {w} is gone already")
        return 0
    try:
        from jobs import result as result_mod

        res = result_mod.read(Repo(w / "src"))
    except GitError:
        res = None
    if res is None or res.outcome != "passed":
        say(f"cleanup: kept {w}: the job has not passed ({res.outcome if res else 'no result'}); a resend resumes it")
        return 0
    published = (w / "published").read_text().strip() if (w / "published").exists() else ""
    if published != res.commit:
        say(f"cleanup: kept {w}: its result is not published")
        return 0
    if not archive_mod.marker(Path(share), job, run_id).exists():
        say(f"cleanup: kept {w}: its logs did not reach the share (no archived-{run_id} marker)")
        return 0
    archive_mod.remove_job_dir(w)
    say(f"cleanup: removed {w} (passed, published, archived)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nev job step")
    sub = p.add_subparsers(dest="step", required=True)
    a = sub.add_parser("prepare")
    a.add_argument("--job", required=True)
    a.add_argument("--forge", default="")
    a.add_argument("--mirror", required=True)
    a.add_argument("--work", required=True)
    a.add_argument("--npm-cache", default="")
    a = sub.add_parser("run")
    a.add_argument("--job", required=True)
    a.add_argument("--work", required=True)
    a.add_argument("--manifest", required=True, help="a path on the lane, or relative to the job's tree")
    a.add_argument("--inventory", default="")
    a.add_argument("--declared", default="", help="declared aliases (default: the job tree's bench/folknet.json)")
    a = sub.add_parser("publish")
    a.add_argument("--job", required=True)
    a.add_argument("--forge", required=True)
    a.add_argument("--work", required=True)
    for name in ("archive", "cleanup"):
        a = sub.add_parser(name)
        a.add_argument("--job", required=True)
        a.add_argument("--run-id", required=True)
        a.add_argument("--work", required=True)
        a.add_argument("--share", required=True)
        if name == "archive":
            a.add_argument("--step-logs", default="")
            a.add_argument("--run-log", default="")
    ns = p.parse_args(argv)
    os.environ.update(git_env())  # predictable git for every step
    try:
        if ns.step == "prepare":
            return prepare(ns.job, ns.forge, ns.mirror, ns.work, ns.npm_cache)
        if ns.step == "run":
            w = job_dir(ns.work, ns.job)
            declared = Path(ns.declared) if ns.declared and Path(ns.declared).is_file() else None
            manifest = Path(ns.manifest) if os.path.isabs(ns.manifest) else w / "src" / ns.manifest
            # the stages run the lane's installed nev: nothing on PYTHONPATH may shadow it
            stage_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            from jobs import runner  # the run step only: the others start without its imports

            return runner.run(manifest, w / "src", w / "state",
                              Path(ns.inventory).expanduser() if ns.inventory else None, declared, stage_env)
        if ns.step == "publish":
            return publish(ns.job, ns.forge, ns.work)
        if ns.step == "archive":
            return do_archive(ns.job, ns.run_id, ns.work, ns.share, ns.step_logs or None, ns.run_log or None)
        return cleanup(ns.job, ns.run_id, ns.work, ns.share)
    except NevError as e:
        print(f"nev: {archive_mod.scrub(str(e))}", file=sys.stderr, flush=True)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
