"""Processes on this machine by recorded PID: the one reader of `/proc/<pid>/stat`, and a daemon's
record (PID and kernel start time), its start, its check and its stop.

A daemon is started detached (its own session, re-parented away from the caller so a test
process never collects zombies) and recorded with its PID and kernel start time; it counts as
alive only while that PID exists, is not a zombie and still has that start time, so a reused
PID is never mistaken for ours. The lane agent (`lanes/agent/procs.py`) keeps its own reader: it
is standard-library only and shipped alone.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lanes.base.errors import NevError

# sh starts the daemon in the background (setsid: its own session; it then belongs to init, not
# to us), prints its PID and exits. Everything is exec'd, so that PID is the daemon's own.
_LAUNCH = 'log=$1; shift; setsid "$@" </dev/null >>"$log" 2>&1 & echo $!'


@dataclass(frozen=True)
class Stat:
    """The fields of `/proc/<pid>/stat` that nev reads (proc(5) numbers them from 1)."""

    state: str      # 3: R, S, D, Z (zombie), X (dead), ...
    ppid: int       # 4
    pgrp: int       # 5: the process group
    utime: int      # 14: user CPU, clock ticks
    stime: int      # 15: system CPU, clock ticks
    start: int      # 22: start time, clock ticks since boot


def stat(pid: int) -> Stat | None:
    """`/proc/<pid>/stat` read: None when the process is gone or the file cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        # the command name (field 2) is in parentheses and may itself hold ")" or spaces
        fields = raw[raw.rindex(b")") + 2:].split()
        return Stat(state=fields[0].decode(errors="replace"), ppid=int(fields[1]),
                    pgrp=int(fields[2]), utime=int(fields[11]), stime=int(fields[12]),
                    start=int(fields[19]))
    except (OSError, ValueError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """Kernel start time of a PID (clock ticks since boot), None when gone or a zombie."""
    s = stat(pid)
    return None if s is None or s.state in ("Z", "X") else s.start


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time a process has used so far."""
    s = stat(pid)
    return None if s is None else (s.utime + s.stime) / os.sysconf("SC_CLK_TCK")


def pid_alive(pid: int) -> bool:
    """True when `pid` is a live (non-zombie) process; one of another user's counts."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    s = stat(pid)
    return s is None or s.state != "Z"


@dataclass
class ProcRec:
    key: str          # e.g. "lane0.sshd", "forge.nginx"
    host: str
    pid: int
    start: int        # /proc/PID/stat field 22 (start time in clock ticks)
    argv: list[str]
    conf: str = ""    # digest of its config files when started: a changed config restarts it

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def alive(rec: ProcRec | None) -> bool:
    return rec is not None and start_time(rec.pid) == rec.start


def spawn(key: str, host: str, argv: list[str], log: Path, env: Mapping[str, str] | None = None,
          cwd: Path | None = None) -> ProcRec:
    log.parent.mkdir(parents=True, exist_ok=True)
    cp = subprocess.run(["sh", "-c", _LAUNCH, "sh", str(log), *argv], capture_output=True,
                        text=True, env=dict(env) if env is not None else None, cwd=cwd, timeout=30)
    try:
        pid = int(cp.stdout.strip())
    except ValueError:
        raise NevError(f"could not start {key}: {cp.stderr.strip() or 'no PID'}; see {log}") from None
    st = start_time(pid)
    if st is None:
        raise NevError(f"{key} exited at once; see {log}")
    return ProcRec(key=key, host=host, pid=pid, start=st, argv=list(argv))


def adopt(key: str, host: str, pid: int, argv: list[str]) -> ProcRec:
    """A daemon something else started (a unit script), recorded like one we spawned."""
    st = start_time(pid)
    if st is None:
        raise NevError(f"{key} (PID {pid}) is not running")
    return ProcRec(key=key, host=host, pid=pid, start=st, argv=list(argv))


def stop(rec: ProcRec, grace: float = 5.0) -> bool:
    """SIGTERM the recorded process (only if it is still the one we started), SIGKILL after
    `grace` seconds. True when it was running."""
    if not alive(rec):
        return False
    try:
        os.kill(rec.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(rec):
            return True
        time.sleep(0.02)
    try:
        os.kill(rec.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 2
    while alive(rec) and time.monotonic() < deadline:
        time.sleep(0.02)
    return True


def kill_pids(pids: list[int]) -> None:
    """SIGKILL these processes (those already gone are skipped): what is left inside a
    namespace its owner removes."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
