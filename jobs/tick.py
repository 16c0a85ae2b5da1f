"""The unattended tick (`nev job poll`): approved tracks, then finished jobs, under one lock; once a
day, retention.

| part | what it does | its lines in the tick's log |
|---|---|---|
| approved tracks | `tracks.json → specWatch.landScript`: `nev land --approved` (or absent) is `jobs.land.land_approved` in this process; another command runs in the repository | `land: track NAME: landed / not landed (exit N) / skipped: why` |
| finished jobs | `jobs.poll.poll_jobs`: result/* on the forge and each job's Dagu run (skipped with a line when no forge URL is set) | `NAME: landed / failed / waiting / resent: why` |
| retention, once a day | `lanes.sweep.sweep_archives` on the share, through the first lane that answers (`retention.stamp` in the state folder says when it last ran) | `retention: ...` |

One tick runs at a time per state folder (`job-poll.lock`): a tick that finds another still
running (a landing can outlast the minute between ticks) says so and does nothing. Both parts
get tracks.json → specWatch.pollEnv over the tick's environment. Exit: the worst of the parts.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from jobs import land as landing
from jobs import poll as poll_mod
from jobs import records, tracks
from jobs.approvals import MAIN
from jobs.land_gate import INTERRUPTED
from lanes import forge as forge_mod
from lanes.base import notify, settings
from lanes.base.errors import NevError
from lanes.base.gitrun import Repo
from lanes.base.ui import info
from lanes.lanesfile import lanes_configured

LAND_APPROVED = ["nev", "land", "--approved"]
DAY_S = 24 * 3600


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


def tick(repo_path: Path | None = None, environ: Mapping[str, str] | None = None) -> int:
    """`nev job poll`: one tick (see the module's table)."""
    env = dict(os.environ if environ is None else environ)
    repo = Repo(Repo(repo_path or Path.cwd()).toplevel())
    with one_tick(env) as other:
        if other is not None:
            info(f"tick: another tick (PID {other or '?'}) is still running; this one does nothing")
            return 0
        with notify.ticking(env):
            env = landing.with_poll_env(repo, env)
            worst = _tracks(repo, env)
            worst = max(worst, _jobs(repo, env))
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
            return landing.land_approved(repo.path, environ=env)
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


def _jobs(repo: Repo, env: dict[str, str]) -> int:
    if not settings.get(settings.FORGE_URL, env) and not forge_mod.lane_url_from_settings(env):
        info("tick: jobs: skipped: no forge URL (NEV_FORGE_URL, NEV_LANE_GIT_URL or the lanes file's git_url)")
        return 0
    return poll_mod.poll_jobs(repo, forge_mod.from_settings(env, repo), env)


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
