"""The unattended tick (`nev job poll`): approved tracks, then finished jobs, under one lock; once a
day, retention; and its schedule (`nev job poll --install`) with the environment it runs in.

| part | what it does | its lines in the tick's log |
|---|---|---|
| other packages' parts (`PARTS`) | the serving tier's mending, wired in by the `nev` entry point (`rig/serving/mend.py`), first: the jobs resent this tick find a mended alias ready | `tick: mend: ...` |
| approved tracks | `tracks.json → specWatch.landScript`: `nev land --approved` (or absent) is `land_approved` (below) in this process; another command runs in the repository | `land: track NAME: landed / not landed (exit N) / skipped: why` |
| finished jobs | `jobs.poll.poll_jobs`: result/* on the forge and each job's Dagu run (skipped with a line when no forge URL is set) | `NAME: landed / failed / waiting / resent: why` |
| regeneration (NEV_PROVENANCE_REGEN) | `jobs.regen.tick_regen` (docs/provenance.md) | `provenance: NAME: ...` |
| retention, once a day | `lanes.sweep.sweep_archives` on the share, through the first lane that answers (`retention.stamp` in the state folder says when it last ran) | `retention: ...` |

One tick runs at a time per state folder (`job-poll.lock`): a tick that finds another still
running (a landing can outlast the minute between ticks) says so and does nothing. Both parts
get tracks.json → specWatch.pollEnv over the tick's environment (`with_poll_env`). Exit: the
worst of the parts.

`install` makes the tick tick: a crontab line (or, with `--dagu-home`, a Dagu workflow with
`schedule: "* * * * *"`) running `nev job poll` in this repository with this shell's non-secret
`NEV_*` settings and tracks.json -> specWatch.pollEnv in its environment (`tick_env`);
`--uninstall` removes it.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import yaml

from jobs import approvals as store
from jobs import land as landing
from jobs import poll as poll_mod
from jobs import records, regen, tracks
from jobs.approvals import MAIN, LandPaths
from jobs.land_after import finish_pending
from jobs.land_gate import INTERRUPTED, stop_leftover_gate
from jobs.landlock import LandLock
from lanes import forge as forge_mod
from lanes import selfinstall
from lanes.base import crontab, notify, settings
from lanes.base.errors import NevError
from lanes.base.gitrun import Repo
from lanes.base.ui import info
from lanes.lanesfile import lanes_configured

LAND_APPROVED = ["nev", "land", "--approved"]
DAY_S = 24 * 3600
CRON_TAG = "# nev-job-poll"
POLL_WORKFLOW = "nev-job-poll"
# Parts of the tick that other packages own (`jobs` imports no `rig`): the `nev` entry point adds
# the serving tier's mending here (rig/commands.py); each takes the tick's environment and
# returns its exit, never raising.
PARTS: list[Callable[[dict[str, str]], int]] = []


@contextmanager
def one_tick(environ: Mapping[str, str]) -> Iterator[int | None]:
    """Held for a whole tick: yields None, or the PID of another tick that holds it."""
    p = records.path(environ).with_name("job-poll.lock")
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.read(fd, 32).decode(errors="replace").strip()
            yield int(raw) if raw.isdigit() else 0
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield None
    finally:
        os.close(fd)


def tick(repo_path: Path | None = None, environ: Mapping[str, str] | None = None,
         seen: list[dict[str, str]] | None = None) -> int:
    """`nev job poll`: one tick (see the module's table); each job's action added to `seen`."""
    # NEV_UNATTENDED: everything the tick runs (a landScript, a gate) is no person's
    env = {**(os.environ if environ is None else environ), settings.UNATTENDED.name: "1"}
    repo = Repo(Repo(repo_path or Path.cwd()).toplevel())
    with one_tick(env) as other:
        if other is not None:
            info(f"tick: another tick (PID {other or '?'}) is still running; this one does nothing")
            return 0
        with notify.ticking(env):
            env = with_poll_env(repo, env)
            worst = max([0, *(part(env) for part in PARTS)])
            worst = max(worst, _tracks(repo, env))
            worst = max(worst, _jobs(repo, env, seen))
            worst = max(worst, regen.tick_regen(repo.path, env))   # only with NEV_PROVENANCE_REGEN
            _retention(env)
            return worst


def _tracks(repo: Repo, env: dict[str, str]) -> int:
    try:
        script = tracks.at(repo, repo.rev(MAIN)).spec_watch.land_script
    except NevError as e:
        info(f"tick: tracks: skipped: {e.message}")
        return 0
    if script is None or shlex.split(script) == LAND_APPROVED:
        try:
            return land_approved(repo.path, environ=env)
        except NevError as e:
            if e.exit_code in INTERRUPTED:
                raise
            info(f"tick: tracks: {e.message}")
            return int(e.exit_code)
    info(f"tick: tracks: running specWatch.landScript: {script}")
    env = {k: v for k, v in env.items() if k != settings.LAND_FAULT.name}
    rc = subprocess.run(["sh", "-c", script], cwd=repo.path, env=env, stdin=subprocess.DEVNULL,
                        stdout=sys.stderr.fileno(), check=False).returncode
    info(f"tick: tracks: specWatch.landScript exited {rc}")
    return rc


def _jobs(repo: Repo, env: dict[str, str], seen: list[dict[str, str]] | None = None) -> int:
    if not settings.get(settings.FORGE_URL, env) and not forge_mod.lane_url_from_settings(env):
        info("tick: jobs: skipped: no forge URL (NEV_FORGE_URL, NEV_LANE_GIT_URL or the lanes "
             "file's git_url)")
        return 0
    return poll_mod.poll_jobs(repo, forge_mod.from_settings(env, repo), env, seen)


def retention_due(stamp: Path, now: float) -> bool:
    """Once a day (pure but for the stamp's time)."""
    try:
        return now - stamp.stat().st_mtime >= DAY_S
    except FileNotFoundError:
        return True


def _retention(env: dict[str, str]) -> None:
    stamp = records.path(env).with_name("retention.stamp")
    if not retention_due(stamp, time.time()):
        return
    if not lanes_configured(env):
        info("tick: retention: skipped: no build lane is configured to reach the share through")
        return
    from lanes import sweep  # the SSH stack, loaded only when a lane is configured

    days = settings.get_float(settings.ARCHIVE_KEEP_DAYS, env)
    try:
        rc, _ = sweep.sweep_archives(days, say=lambda m: info(f"tick: retention: {m}"))
    except NevError as e:
        info(f"tick: retention: failed: {e.message}; the next tick tries again")
        return
    if rc == 0:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()


# -- the approved tracks ------------------------------------------------------------------------

def with_poll_env(repo: Repo, env: dict[str, str]) -> dict[str, str]:
    """`env` with main's tracks.json → specWatch.pollEnv over it, each change said on one line."""
    try:
        poll_env = tracks.at(repo, repo.rev(MAIN)).spec_watch.poll_env
    except NevError:
        poll_env = {}
    for k, v in poll_env.items():
        if env.get(k) != v:
            info(f"land: {k}={v} (tracks.json specWatch.pollEnv)")
    return {**env, **poll_env}


def land_approved(repo_path: Path, environ: Mapping[str, str] | None = None) -> int:
    """`nev land --approved`, the tick: with tracks.json's pollEnv over this environment, finish
    pending landings, then land every approved track in turn, skipping (with a line) any whose
    tip moved since approval. Exit: the worst of the landings."""
    repo = Repo(repo_path)
    env = with_poll_env(repo, dict(os.environ if environ is None else environ))
    paths = LandPaths.of(repo)
    worst = 0
    for n in store.pending_names(paths):
        try:
            if store.load_approval(paths, n) is None:
                with LandLock(paths.lock, wait=settings.get_float(settings.LAND_LOCK_WAIT, env)):
                    stop_leftover_gate(paths, n)
                    finish_pending(repo, paths, n, env)
        except NevError as e:
            info(f"nev land {n}: {e.message}")
            worst = max(worst, e.exit_code)
    tally = {"landed": 0, "skipped": 0, "refused": 0}
    for a in store.list_approvals(paths):
        now = repo.try_rev(f"refs/heads/{a.name}")
        if now is not None and now != a.tip and not paths.pending(a.name).exists():
            info(f"land: track {a.name}: skipped: tip moved since approval "
                 f"(approved {a.tip[:12]}, now {now[:12]})")
            tally["skipped"] += 1
            continue
        try:
            rc = landing.land(repo_path, a.name, a.spec_sha, a.tip, environ=env)
        except NevError as e:
            if e.exit_code in INTERRUPTED:
                raise
            info(f"nev land {a.name}: {e.message}")
            rc = e.exit_code
        if rc == 0:
            store.drop_approval(paths, a.name)
        info(f"land: track {a.name}: "
             + ("landed" if rc == 0 else f"not landed (exit {rc}); still approved"))
        tally["landed" if rc == 0 else "refused"] += 1
        worst = max(worst, rc)
    info("land: tick: " + ", ".join(f"{v} {k}" for k, v in tally.items()))
    return worst


# -- the tick's schedule ------------------------------------------------------------------------

def tick_env(repo: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a scheduled tick: this shell's non-secret NEV_* settings, then pollEnv."""
    env = {**crontab.carried_env(environ), **selfinstall.pythonpath()}
    tf = repo / "tracks.json"
    if tf.exists():
        env.update(tracks.load(tf).spec_watch.poll_env)
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
    """`nev job poll --install` (`on`) or `--uninstall`: the crontab line, or the Dagu workflow."""
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
        info("the crontab already "
             + ("has this repository's tick" if on else "has no tick for this repository"))
        return 0
    info(("installed" if on else "removed") + f" the tick's crontab line for {repo} (log {log})")
    return 0
