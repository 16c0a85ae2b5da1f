"""A batch in one jail of the one sandbox (`lanes.base.sandbox`, docs/sandbox.md): every job a
process of its own under one supervisor (`run_many`), and the verdict of a jailed process that
ended without its answer (`explain`)."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from lanes.base import jailrun
from lanes.base.sandboxfilters import syscall_name
from lanes.base.sandboxjail import PYTHON, Jail, Limits, Outcome, check, inside, run

# ---- a batch in one jail ----


@dataclass(frozen=True)
class Job:
    """One process of a batch run in one jail (`run_many`)."""

    argv: Sequence[str]
    stdin: str = ""
    #: bytes of its stdout kept (the rest is read, counted and dropped)
    keep: int = 1 << 20


def run_many(
    jobs: Sequence[Job], jail: Jail, *, parallel: int, timeout_each: float
) -> list[Outcome]:
    """Every job as a process of its own, `parallel` at a time, under one supervisor inside one jail
    (`lanes/base/jailrun.py`): a jail costs ~15 ms to build, a process in it ~1 ms. Each process
    keeps the jail's limits for itself; the jail may start processes (the supervisor does), so what
    a job runs must lock itself (the candidate runner's `--lockdown`) before any untrusted code."""
    spec = [jailrun.Spec(list(j.argv), j.stdin, keep=j.keep) for j in jobs]
    if not jobs:
        return []
    if jail.bare or inside():
        got = jailrun.run_all(spec, parallel, timeout_each)
        return [_outcome(r) for r in got]
    check()
    supervisor = Path(jailrun.__file__).resolve()
    outer = Jail(
        read=(*jail.read, supervisor),
        write=jail.write,
        processes=True,
        limits=jail.limits,
        env=jail.env,
        cwd=jail.cwd,
        etc=jail.etc,
    )
    rounds = -(-len(jobs) // max(1, parallel))
    req = json.dumps({"jobs": [asdict(j) for j in spec], "parallel": parallel,
                      "timeout": timeout_each}).encode()
    out = run(
        [PYTHON, "-I", "-S", str(supervisor)],
        outer,
        timeout=rounds * (timeout_each + 5) + 60,
        stdin=req,
    )
    results: dict[int, Outcome] = {}
    for line in out.stdout.splitlines():
        try:
            r = json.loads(line)
            results[int(r["index"])] = _outcome(jailrun.Ran.from_json(r))
        except (ValueError, KeyError, TypeError):
            continue
    why = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
    lost = Outcome(
        out.returncode,
        "",
        f"the sandbox's supervisor ended before this job: {why}",
        timed_out=out.timed_out,
    )
    return [results.get(k, lost) for k in range(len(jobs))]


def _outcome(r: jailrun.Ran) -> Outcome:
    """One job's result as the supervisor reported it."""
    return Outcome(r.returncode, r.stdout, r.stderr, r.timed_out, r.stdout_bytes, r.elapsed)


# ---- verdicts ----

_FORBIDDEN = re.compile(r"forbidden system call (\d+)")
_OOM = re.compile(
    r"memory allocation of \d+ bytes failed|cannot allocate memory|out of memory", re.I
)


def explain(out: Outcome, limits: Limits, reported: bool) -> str | None:
    """Why a jailed process ended without its answer, in a few words; None when it gave it.

    | what happened                              | verdict                               |
    |--------------------------------------------|---------------------------------------|
    | the runner named a trapped call            | forbidden system call: socket         |
    | SIGSYS with no name (before the runner's lock) | forbidden system call             |
    | Rust's stack overflow message              | stack overflow                        |
    | an allocation failed                       | killed: memory cap 2 GiB              |
    | SIGXCPU / SIGKILL after the CPU limit      | killed: CPU time cap 60 s             |
    | the wall-clock limit                       | killed: timed out                     |
    | SIGABRT otherwise                          | aborted                               |
    | another signal                             | killed by signal N                    |
    | exit status without the answer             | exited N before reporting             |
    """
    if out.timed_out:
        return "killed: timed out"
    m = _FORBIDDEN.search(out.stderr)
    if m:
        return f"forbidden system call: {syscall_name(int(m.group(1)))}"
    if "has overflowed its stack" in out.stderr or "stack overflow" in out.stderr:
        return "stack overflow"
    if _OOM.search(out.stderr):
        return f"killed: memory cap {limits.memory_label()}"
    sig = out.returncode - 128 if out.returncode > 128 else None
    if sig == signal.SIGSYS:
        return "forbidden system call"
    if sig in (signal.SIGXCPU, signal.SIGKILL) and limits.cpu_s is not None:
        return f"killed: CPU time cap {limits.cpu_s} s"
    if sig == signal.SIGABRT:
        return "aborted"
    if sig is not None:
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    if reported:
        return None
    return f"exited {out.returncode} before reporting"
