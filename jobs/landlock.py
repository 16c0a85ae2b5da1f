"""The land lock: one `nev land` at a time per repository, held on a file in the git directory.

An advisory `flock` does the locking, so the kernel releases it when its holder dies, even
by SIGKILL. The file also holds the holder's PID: a waiter names it, and a lock left by a
dead PID is taken over with a line saying so.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from lanes.base.errors import NevError
from lanes.base.procs import pid_alive
from lanes.base.ui import info


def _read_pid(fd: int) -> int | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 64).decode(errors="replace").strip()
    return int(raw) if raw.isdigit() else None


class LandLock:
    """`with LandLock(path, wait=600):` waits up to `wait` seconds, then refuses (exit 1)."""

    def __init__(self, path: Path, wait: float) -> None:
        self.path = path
        self.wait = wait
        self.fd: int | None = None

    def __enter__(self) -> LandLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.wait
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read_pid(fd)
                if not said:
                    info(f"land: waiting for the land lock {self.path} (held by nev land PID {holder or '?'})")
                    said = True
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise NevError(f"another nev land (PID {holder or '?'}) has held the land lock {self.path} "
                                   f"for over {self.wait:.0f} s; not landed, try again later") from None
                time.sleep(0.05)
        prev = _read_pid(fd)
        if prev is not None and prev != os.getpid() and not pid_alive(prev):
            info(f"land: took over a stale land lock from dead PID {prev}")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = None
