"""The compile budget: rustc calls on candidates, side by side, each ended when it runs too long.

A candidate can make the compiler hang (a constant whose evaluation never ends, a macro that
expands without end) or eat memory (a huge static, the same macro). In a batch compiled as one
crate that would hold every good neighbour hostage. So every rustc call on candidates runs under:

- a memory cap (`NEV_COMPILE_MEMORY_MB`, the address space of rustc and its linker), past which
  rustc stops (`compiler ran out of memory`);
- the budget (`NEV_COMPILE_BUDGET_S`): the longest one call may take;
- once a batch's compile has been stopped, a search (`crates_bridge.candidates.compile_single`)
  compiles it again in parts, side by side, and a part that runs `FACTOR` times longer than the
  slowest part that finished (at least `MIN_CUT_S`) is stopped too: its peers show what a clean
  compile of that size costs. A part stopped that way is split again, down to one candidate,
  whose verdict is `compile timed out`.

`deadline` is the pure rule; `race` runs the calls.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lanes.base import sandbox

#: a part of a search is stopped past FACTOR x the slowest finished part's time ...
FACTOR = 2.0
#: ... and never before this many seconds
MIN_CUT_S = 1.0
_POLL_S = 0.02


def budget_s() -> float:
    """NEV_COMPILE_BUDGET_S, checked."""
    return sandbox.compile_budget_s()


def memory_bytes() -> int:
    """NEV_COMPILE_MEMORY_MB in bytes, checked."""
    return sandbox.compile_memory_bytes()


def deadline(budget: float, relative: bool, finished: Sequence[float]) -> float:
    """How long a call may run.

    | the call                                   | it may run                                    |
    |--------------------------------------------|-----------------------------------------------|
    | a batch's own compile (not a search)       | the budget                                    |
    | a part of a search, no part finished yet   | the budget                                    |
    | a part of a search, parts finished         | max(MIN_CUT_S, FACTOR x the slowest        |
    |                                            | finished), at most the budget              |
    """
    if not relative or not finished:
        return budget
    return min(budget, max(MIN_CUT_S, FACTOR * max(finished)))


@dataclass(frozen=True)
class Run:
    """One rustc call's end."""

    out: sandbox.Outcome
    elapsed_s: float
    #: stopped by the budget or a search's cut (`out.timed_out` too)
    stopped: bool = False
    #: how long it was allowed when stopped
    allowed_s: float = 0.0
    #: when a search's cut stopped it: the slowest peer that had finished (None: the budget did)
    peers_s: float | None = None


def race(
    argvs: Sequence[Sequence[str]],
    jail: sandbox.Jail,
    budget: float,
    relative: bool,
    finished: list[float],
) -> list[Run]:
    """Every call at once, each in `jail`; each stopped past its `deadline`. `finished` holds the
    times of the parts that ended normally (in this search, earlier rounds included): it grows as
    they end, and tightens the others' deadline."""
    if not argvs:
        return []
    began = time.monotonic()
    procs = [
        sandbox.popen(
            list(a),
            jail,
            warn=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for a in argvs
    ]
    outs: list[tuple[bytes, bytes] | None] = [None] * len(procs)
    ended: list[float | None] = [None] * len(procs)
    stopped: dict[int, tuple[float, float | None]] = {}   # k -> (allowed, slowest peer or None)
    lock = threading.Lock()

    def wait(k: int) -> None:
        o, e = procs[k].communicate()
        with lock:
            outs[k] = (o, e)
            ended[k] = time.monotonic() - began
            rc = procs[k].returncode
            # ended by itself: compiled, or refused with the compiler's own errors
            # (a crash is no yardstick)
            if k not in stopped and (rc == 0 or (rc == 1 and b'"level":"error"' in e)):
                finished.append(ended[k] or 0.0)

    threads = [threading.Thread(target=wait, args=(k,), daemon=True) for k in range(len(procs))]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(_POLL_S)
        now = time.monotonic() - began
        with lock:
            allowed = deadline(budget, relative, finished)
            for k, p in enumerate(procs):
                if ended[k] is None and k not in stopped and now > allowed:
                    peers = max(finished) if allowed < budget and finished else None
                    stopped[k] = (allowed, peers)
                    sandbox.stop(p)
    for t in threads:
        t.join()
    runs = []
    for k, p in enumerate(procs):
        o, e = outs[k] or (b"", b"")
        code = p.returncode if p.returncode is not None else -9
        out = sandbox.Outcome(
            128 - code if code < 0 else code,
            o.decode("utf-8", "replace"),
            e.decode("utf-8", "replace"),
            timed_out=k in stopped,
        )
        allowed, peers = stopped.get(k, (0.0, None))
        runs.append(Run(out, ended[k] or 0.0, k in stopped, allowed, peers))
    return runs


def why_stopped(run: Run, memory: int) -> str | None:
    """The verdict of a call that did not end by itself, or ran out of memory; None otherwise."""
    if run.stopped:
        if run.peers_s is not None:
            return (f"compile timed out after {run.allowed_s:.1f} s "
                    f"(its peers compiled in {run.peers_s:.1f} s)")
        return f"compile timed out after {run.allowed_s:.1f} s"
    err = run.out.stderr
    if (
        "memory allocation of" in err
        or "out of memory" in err.lower()
        or "Cannot allocate memory" in err
    ):
        return f"compiler ran out of memory (cap {memory // sandbox.MiB} MiB)"
    if run.out.returncode > 128:
        return f"the compiler was killed by signal {run.out.returncode - 128}"
    return None
