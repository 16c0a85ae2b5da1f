"""The supervisor inside one sandbox (`sandbox.run_many`): it starts each job as a process of its
own, a few at a time, and reports each one's exit status, (bounded) output and wall time, so a
batch of candidates costs one jail instead of one per candidate. Standard library only: it runs with the
system's `python3 -I -S` inside the jail, reading its jobs as JSON on stdin and writing one JSON
line per finished job on stdout.

Each job's process inherits the jail's limits (address space and CPU time are per process) and is
what it runs alone: whatever ends it (an exit, an abort, a signal) ends that job only. The output
kept per stream is bounded (`KEEP` bytes; the rest is read and dropped), so a job that prints
without end neither fills the jail's /tmp nor the supervisor's memory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import IO

KEEP = 1 << 20


@dataclass(frozen=True)
class Spec:
    """One job as the request names it: its argv, what it reads, where, and how much of its stdout
    is kept."""

    argv: list[str]
    stdin: str = ""
    cwd: str | None = None
    env: dict[str, str] | None = None
    keep: int = KEEP

    @classmethod
    def from_json(cls, obj: object) -> Spec:
        """A job of the request (nev's own, written by `run_many`): ValueError when it is not one."""
        if not isinstance(obj, dict) or not isinstance(obj.get("argv"), list) \
                or not all(isinstance(a, str) for a in obj["argv"]):
            raise ValueError("a job names its argv as a list of strings")
        env = obj.get("env")
        return cls(list(obj["argv"]), str(obj.get("stdin", "")),
                   obj.get("cwd") if isinstance(obj.get("cwd"), str) else None,
                   {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else None,
                   int(obj.get("keep", KEEP)))


@dataclass(frozen=True)
class Ran:
    """One job's end: its status (128 + the signal when one ended it), its output (at most `keep`
    bytes of stdout kept), whether time ran out, all the stdout it wrote (counted) and its wall
    time (None: it never started)."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    stdout_bytes: int = -1
    elapsed: float | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, object]) -> Ran:
        """A line of the supervisor's (KeyError, TypeError or ValueError when it is not one)."""
        elapsed = obj.get("elapsed")
        return cls(int(str(obj["returncode"])), str(obj["stdout"]), str(obj["stderr"]),
                   bool(obj["timed_out"]), int(str(obj.get("stdout_bytes", -1))),
                   float(str(elapsed)) if elapsed is not None else None)


def _drain(stream: IO[bytes], keep: bytearray, limit: int, total: list[int]) -> None:
    while True:
        chunk = stream.read(65536)
        if not chunk:
            return
        total[0] += len(chunk)
        room = limit - len(keep)
        if room > 0:
            keep.extend(chunk[:room])


def run_one(
    argv: Sequence[str],
    stdin: bytes,
    timeout: float,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    keep: int = KEEP,
) -> Ran:
    """One job: its status (128 + the signal when one ended it), its output (at most `keep` bytes of
    stdout kept, all of it counted), whether time ran out, and its wall time from start to end,
    measured here: the job's own process cannot change it."""
    began = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        return Ran(127, "", f"cannot start {argv[0]}: {e.strerror}", False)
    out, err = bytearray(), bytearray()
    out_n, err_n = [0], [0]
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, out, keep, out_n), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err, KEEP, err_n), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
    except OSError:
        pass  # it ended (or closed its stdin) before reading
    timed_out = False
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        code = proc.wait()
    elapsed = time.monotonic() - began
    for t in readers:
        t.join(timeout=5)
    return Ran(128 - code if code < 0 else code, out.decode("utf-8", "replace"),
               err.decode("utf-8", "replace"), timed_out, out_n[0], round(elapsed, 6))


def run_all(
    jobs: Sequence[Spec], parallel: int, timeout: float,
    on_done: Callable[[int, Ran], None] | None = None,
) -> list[Ran]:
    """Every job, `parallel` at a time; `on_done(index, result)` as each finishes."""
    results: list[Ran | None] = [None] * len(jobs)

    def one(k: int) -> None:
        job = jobs[k]
        r = run_one(job.argv, job.stdin.encode(), timeout, job.cwd, job.env, job.keep)
        results[k] = r
        if on_done is not None:
            on_done(k, r)

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        list(pool.map(one, range(len(jobs))))
    return [r for r in results if r is not None]


def main() -> int:
    req = json.load(sys.stdin)
    lock = threading.Lock()
    t0 = time.monotonic()

    def done(k: int, r: Ran) -> None:
        with lock:
            line = {"index": k, **r.to_json(), "at": round(time.monotonic() - t0, 3)}
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()

    jobs = [Spec.from_json(j) for j in req["jobs"]]
    run_all(jobs, int(req.get("parallel", 1)), float(req["timeout"]), done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
