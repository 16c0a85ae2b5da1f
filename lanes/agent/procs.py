"""Process trees on the lane: a child in its own session, and stopping it with everything it started.

A stop signals the child's process group, every descendant, and every process of this run that
left the tree (`setsid`, a double fork) but still works in the copy: same user, started after
the child, current directory inside the copy. What is left after STOP_GRACE gets SIGKILL.
Processes are found by their tree and their directory, never by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from lanes.agent.errors import Stopped
from lanes.agent.wire import Stop

STOP_GRACE = 1.0
_SIGNALS = {Stop.INT: signal.SIGINT, Stop.TERM: signal.SIGTERM}


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (state first)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in _pids():
        fields = _stat_fields(p)
        if fields is not None and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(p)
    out: list[int] = []
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != b"Z"


def escaped(copy: str, since: int) -> set[int]:
    """Our processes that left the tree but still work in the copy: same user, started after the
    child (`since`, in clock ticks), current directory inside the copy."""
    out: set[int] = set()
    me = os.getpid()
    real = os.path.realpath(copy)
    for pid in _pids():
        if pid == me:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != os.getuid():
                continue
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        started = start_ticks(pid)
        if started is not None and started >= since and (cwd == real or cwd.startswith(real + os.sep)):
            out.add(pid)
    return out


def _signal_all(group: int, pids: set[int], sig: int) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_tree(pid: int, sig: int, copy: str | None = None, since: int | None = None) -> None:
    """Signal the group of `pid`, its descendants and (given `copy` and `since`) the processes
    that escaped the tree; then SIGKILL what is left after STOP_GRACE."""

    def victims_now() -> set[int]:
        v = {pid, *descendants(pid)}
        if copy is not None and since is not None:
            v |= escaped(copy, since)
        return v

    victims = victims_now()
    _signal_all(pid, victims, sig)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline:
        if not any(alive(v) for v in victims):
            return
        time.sleep(0.05)
    _signal_all(pid, victims | victims_now(), signal.SIGKILL)


class Child:
    """The one process of a run that a stop reaches (the forge fetch, then the command), and the
    stop itself: set once, by a signal on the lane, a stop request or a closed connection."""

    def __init__(self, copy: str) -> None:
        self.copy = copy
        self.stopping = threading.Event()
        self.how = Stop.TERM
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        """`argv` in a session of its own, as the child a stop reaches; stopped at once when a
        stop came first. FileNotFoundError and PermissionError are the caller's."""
        p = subprocess.Popen(argv, start_new_session=True, **popen)
        with self._lock:
            self._proc = p
        if self.stopping.is_set():
            self.kill()
        return p

    def done(self) -> None:
        with self._lock:
            self._proc = None

    def run_tool(self, argv: list[str], cwd: str, env: dict[str, str]) -> tuple[int, bytes]:
        """A helper process (the fetch) that a stop stops too: (exit status, stderr)."""
        p = self.start(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
        try:
            _, err = p.communicate()
        finally:
            self.done()
        self.check()
        return p.returncode, err

    def check(self) -> None:
        """Raise Stopped once a stop was asked for."""
        if self.stopping.is_set():
            raise Stopped()

    def stop(self, how: Stop) -> None:
        self.how = how
        self.stopping.set()
        self.kill()

    def kill(self) -> None:
        with self._lock:
            p = self._proc
        if p is None or p.poll() is not None:
            return
        stop_tree(p.pid, _SIGNALS[self.how], self.copy, start_ticks(p.pid))


def on_signals(handler: Callable[[Stop], None]) -> None:
    """SIGINT stops as INT; SIGTERM and SIGHUP (the session gone) as TERM."""

    def on_signal(signum: int, frame: object) -> None:
        handler(Stop.INT if signum == signal.SIGINT else Stop.TERM)

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)
