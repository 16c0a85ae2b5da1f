"""Supervises one `dagu worker` on a lane: caps its log and stops it when it spins.

Copied to the lane by `nev dagu up --distributed` and run there with the lane's
python3 (standard library only). A worker that cannot reach its coordinator logs
tens of thousands of lines a second at full CPU; this stops it (TERM, then KILL)
when more than --max-lines lines arrive within --window seconds, and writes why
as the log's last line. The log is rotated once at --cap bytes (log and log.1).

Usage: supervise.py --log FILE --pidfile FILE [--cap BYTES] [--max-lines N] [--window S] -- CMD...
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections import deque

EXIT_SPINNING = 3


class Log:
    def __init__(self, path: str, cap: int) -> None:
        self.path = path
        self.cap = cap
        self.f = open(path, "ab", buffering=0)  # noqa: SIM115 - held for the process's life
        self.size = self.f.tell()

    def write(self, line: bytes) -> None:
        if self.size + len(line) > self.cap:
            self.f.close()
            os.replace(self.path, self.path + ".1")
            self.f = open(self.path, "ab", buffering=0)  # noqa: SIM115
            self.size = 0
        self.f.write(line)
        self.size += len(line)

    def note(self, text: str) -> None:
        self.write(f"nev supervisor: {text}\n".encode())
        self.f.flush()


def _die_with_parent() -> None:
    """In the worker: get SIGTERM when the supervisor dies (even by SIGKILL), so no worker runs unsupervised."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--pidfile", required=True)
    ap.add_argument("--cap", type=int, default=5 * 1024 * 1024)
    ap.add_argument("--max-lines", type=int, default=2000)
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("give the command after --")
    log = Log(a.log, a.cap)
    with open(a.pidfile, "w") as f:
        f.write(str(os.getpid()))
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             preexec_fn=_die_with_parent)
    stopping = False

    def stop_child(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, stop_child)
    signal.signal(signal.SIGINT, stop_child)
    log.note(f"started pid {child.pid}: {' '.join(cmd[:2])}")
    stamps: deque[float] = deque()
    assert child.stdout is not None
    reason = ""
    for line in child.stdout:
        log.write(line)
        now = time.monotonic()
        stamps.append(now)
        while stamps and now - stamps[0] > a.window:
            stamps.popleft()
        if len(stamps) > a.max_lines and not stopping:
            reason = f"stopping the worker: {len(stamps)} log lines within {a.window:.0f} s (spinning; " \
                     "can it reach its coordinator, with a valid certificate?)"
            log.note(reason)
            stopping = True
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
            break
    rc = child.wait()
    log.note(f"worker exited with {rc}")
    try:
        os.unlink(a.pidfile)
    except OSError:
        pass
    return EXIT_SPINNING if reason else (0 if stopping else rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
