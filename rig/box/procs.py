"""Starting, checking and stopping the box's daemons, by recorded PID only.

A daemon is started detached (its own session, re-parented away from the caller so a test
process never collects zombies) and recorded with its PID and kernel start time; it counts as
alive only while that PID exists, is not a zombie and still has that start time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from lanes.base.errors import NevError
from rig.box.state import ProcRec

# Never through an HTTP proxy from the environment: box traffic stays on the bridge.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# sh starts the daemon in the background (setsid: its own session; it then belongs to init, not
# to us), prints its PID and exits. Everything is exec'd, so that PID is the daemon's own.
_LAUNCH = 'log=$1; shift; setsid "$@" </dev/null >>"$log" 2>&1 & echo $!'


def start_time(pid: int) -> int | None:
    """Kernel start time of a PID (clock ticks since boot), None when gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time a process has used so far."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    """SIGKILL processes left inside a namespace the box owns (sessions of its lanes)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _wait(answers: Callable[[], bool], who: str, doing: str, timeout: float, rec: ProcRec | None,
          log: Path | None, every: float) -> None:
    """Poll `answers` until it is true; fail when the recorded process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while not answers():
        if rec is not None and not alive(rec):
            raise NevError(f"{rec.key} exited while starting; see {log or 'its log'}")
        if time.monotonic() > deadline:
            raise NevError(f"{rec.key if rec else who} did not {doing} within {timeout:.0f} s; "
                           f"see {log or 'its log'}")
        time.sleep(every)


def wait_port(addr: str, port: int, timeout: float, rec: ProcRec | None = None, log: Path | None = None) -> None:
    _wait(lambda: port_open(addr, port), addr, f"listen on {addr}:{port}", timeout, rec, log, 0.03)


def wait_http(url: str, timeout: float, rec: ProcRec | None = None, log: Path | None = None) -> None:
    _wait(lambda: http_answers(url), url, f"answer {url}", timeout, rec, log, 0.1)


def http_answers(url: str) -> bool:
    """Any answer but a server error (5xx)."""
    try:
        with _OPENER.open(url, timeout=2) as r:
            return bool(r.status < 500)
    except urllib.error.HTTPError as e:
        return e.code < 500
    except OSError:
        return False


def port_open(addr: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False
