"""The landing's gate runner: one gate command on the rebased tip, through the lane path or in
its own recorded process group here, and the test-only fault injection of the lander."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

from jobs import verify_jail
from jobs.approvals import LandPaths
from lanes.base import jsonfile, procgroup, procs, settings
from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from lanes.base.procs import pid_alive
from lanes.base.ui import info
from lanes.lanesfile import lanes_configured

FAULT_PHASES = ("before-rebase", "gate", "before-ref-update", "after-ref-update", "cleanup")
# SIGINT, SIGTERM: an interrupted gate stops the landing (and a tick)
INTERRUPTED = (Exit.INTERRUPTED, Exit.TERMINATED)


def fault(phase: str) -> None:
    """Test-only fault injection: with NEV_LAND_FAULT=<phase> the lander SIGKILLs itself here."""
    if settings.get(settings.LAND_FAULT) == phase:
        info(f"land: NEV_LAND_FAULT={phase}: killing this lander with SIGKILL (test only)")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _fault_timer(phase: str, delay: float = 0.3) -> threading.Timer | None:
    if settings.get(settings.LAND_FAULT) != phase:
        return None
    t = threading.Timer(delay, fault, args=(phase,))
    t.daemon = True
    t.start()
    return t


class Place(StrEnum):
    HERE = "here"
    LANE = "lane"


def where(lane_only: bool, environ: Mapping[str, str]) -> Place:
    """Where one gate command runs (pure but for the lanes file's existence):

    | case | where |
    |---|---|
    | already on a lane (NEV_ON_LANE) | "here", in place |
    | lane-only (verify always; a landCheck under NEV_LANE_STRICT=1) | "lane": no lane answering is exit 3, nothing runs here |
    | not lane-only, no build lane configured | "here" |
    | not lane-only, a lane configured | "lane", falling back to here when none answers (`nev lane on`) |
    """
    if settings.get(settings.ON_LANE, environ):
        return Place.HERE
    if not lane_only and not lanes_configured(environ):
        return Place.HERE
    return Place.LANE


#: how a gate command runs on a lane: as a verify of model-written code, in the lane's sandbox
SANDBOXED = ("nev", "sandbox", "exec", "--")


def run_gate(cmd: str, worktree: Path, lane_only: bool, record: Path, environ: Mapping[str, str]) -> int:
    """Run one gate command on the tip checked out in `worktree`; its exit status.

    `nev lane on` semantics, placed by `where`; on a lane the command sees the NEV_* settings of
    `environ` that travel (`bench.onlane.forwarded_env`: never a secret). Everything but a lane run goes through
    `run_here`, which records its process group in `record` so a rerun after a SIGKILL can stop it."""
    if where(lane_only, environ) is Place.HERE:
        return run_here(cmd, worktree, record, environ)
    from bench.onlane import forwarded_env
    from lanes import gate  # the SSH stack, loaded only when a lane could be used

    timer = _fault_timer("gate")
    try:
        # the landing's settings (tracks.json's pollEnv among them) travel as a batch's do: no secret
        # the track's code: in the lane's sandbox (`nev sandbox exec`: jobs/verify_jail.py)
        return gate.on(worktree, [*SANDBOXED, "sh", "-c", cmd], lane_only=lane_only,
                       extra_env=forwarded_env(environ))
    except NevError as e:
        if e.exit_code in INTERRUPTED:
            raise
        info(f"land: gate: {e.message}")
        return e.exit_code
    finally:
        if timer is not None:
            timer.cancel()


def run_here(cmd: str, worktree: Path, record: Path, environ: Mapping[str, str]) -> int:
    """The command in its own process group here, killed as a whole tree on SIGINT/SIGTERM."""
    env = {k: v for k, v in environ.items() if k != settings.LAND_FAULT.name}
    # the track's code: in the sandbox here too (jobs/verify_jail.py), its ground truth first
    proc = verify_jail.popen(["sh", "-c", cmd], worktree, env, stdin=subprocess.DEVNULL,
                             stdout=sys.stderr.fileno())
    try:
        jsonfile.write_atomic(record, {"pgid": proc.pid, "start": _proc_start(proc.pid),
                                       "lander": os.getpid(), "cmd": cmd})
        timer = _fault_timer("gate")
        rc = proc.wait()
        if timer is not None:
            timer.cancel()
        return rc
    except BaseException:
        procgroup.stop(proc.pid, grace=3.0, leader=proc)
        proc.wait()
        raise
    finally:
        # Anything the command left behind in its group goes too.
        if proc.returncode is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        record.unlink(missing_ok=True)


def stop_leftover_gate(paths: LandPaths, name: str) -> None:
    """A lander killed during its gate leaves the gate running; the next run stops it."""
    rec = paths.gate(name)
    if not rec.exists():
        return
    if rec.is_dir() and not rec.is_symlink():
        jsonfile.load(rec, "gate record")    # one line naming it: nev never made that folder, so it stays
    try:
        data = jsonfile.load(rec, "gate record")
        pgid, start = int(data["pgid"]), data.get("start")
        if not 1 < pgid < 1 << 22:           # no process group id (pid_max is at most 2**22)
            raise ValueError(pgid)
    except (NevError, KeyError, TypeError, ValueError, AttributeError):
        rec.unlink(missing_ok=True)          # a record of our own that cannot be used: gone with its gate
        return
    if pid_alive(pgid) and (start is None or _proc_start(pgid) == start):
        procgroup.stop(pgid, grace=3.0)
        info(f"land: stopped a gate left running by an interrupted landing of {name} (process group {pgid})")
    rec.unlink(missing_ok=True)


# ---------------------------------------------------------------- process groups


def _proc_start(pid: int) -> str | None:
    """The start time a gate record keeps (a string, as records written before hold it)."""
    s = procs.stat(pid)
    return None if s is None else str(s.start)
