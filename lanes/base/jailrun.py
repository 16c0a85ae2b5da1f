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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

KEEP = 1 << 20


def _drain(stream: Any, keep: bytearray, limit: int, total: list[int]) -> None:
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
) -> dict[str, Any]:
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
        return {
            "returncode": 127,
            "stdout": "",
            "stderr": f"cannot start {argv[0]}: {e.strerror}",
            "timed_out": False,
        }
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
    return {
        "returncode": 128 - code if code < 0 else code,
        "stdout": out.decode("utf-8", "replace"),
        "stderr": err.decode("utf-8", "replace"),
        "timed_out": timed_out,
        "stdout_bytes": out_n[0],
        "elapsed": round(elapsed, 6),
    }


def run_all(
    jobs: Sequence[dict[str, Any]], parallel: int, timeout: float, on_done: Any = None
) -> list[dict[str, Any]]:
    """Every job, `parallel` at a time; `on_done(index, result)` as each finishes."""
    results: list[dict[str, Any]] = [{}] * len(jobs)

    def one(k: int) -> None:
        job = jobs[k]
        r = run_one(
            job["argv"],
            job.get("stdin", "").encode(),
            timeout,
            job.get("cwd"),
            job.get("env"),
            int(job.get("keep", KEEP)),
        )
        results[k] = r
        if on_done is not None:
            on_done(k, r)

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        list(pool.map(one, range(len(jobs))))
    return results


def main() -> int:
    req = json.load(sys.stdin)
    lock = threading.Lock()
    t0 = time.monotonic()

    def done(k: int, r: dict[str, Any]) -> None:
        with lock:
            sys.stdout.write(
                json.dumps({"index": k, **r, "at": round(time.monotonic() - t0, 3)}) + "\n"
            )
            sys.stdout.flush()

    run_all(req["jobs"], int(req.get("parallel", 1)), float(req["timeout"]), done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
