"""A job's result: an empty commit on the job's branch whose trailers say how it ended.

```
job clamp-px: passed (exit 0)

Nev-Job: clamp-px
Nev-Job-Outcome: passed
Nev-Job-Exit: 0
Nev-Job-Run: 0193c9f1-...
Nev-Job-Spec: clamp-px
Nev-Job-First-Stage: 2026-12-05T13:40:02.118Z
```

The stages' own commits come before it. The run step commits it; the publish step
pushes the branch as `result/<name>` unless the outcome is `not-run` (exit 3: kept
locally, resent later). The poller reads it from the forge with `read`. `Nev-Job-First-Stage`
(absent when no stage started) is when the job's first stage started on the lane: the poller
keeps it in the job's record, where the job's queue wait ends (`rig/queues.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lanes.base.gitrun import Repo
from lanes.base.mask import mask

TRAILER_JOB = "Nev-Job"
TRAILER_OUTCOME = "Nev-Job-Outcome"
TRAILER_EXIT = "Nev-Job-Exit"
TRAILER_RUN = "Nev-Job-Run"
TRAILER_SPEC = "Nev-Job-Spec"
TRAILER_FIRST_STAGE = "Nev-Job-First-Stage"   # when the job's first stage started (its queue wait ends)
OUTCOMES = ("passed", "failed", "not-run", "stopped")


@dataclass(frozen=True)
class Result:
    job: str
    outcome: str
    exit: int
    run_id: str | None
    commit: str
    reasons: tuple[str, ...] = ()
    spec: str | None = None
    first_stage: str | None = None


def parse_message(message: str, commit: str = "") -> Result | None:
    """The result a commit message records, or None when it is not a result commit (pure)."""
    trailers: dict[str, str] = {}
    body: list[str] = []
    for line in message.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in (TRAILER_JOB, TRAILER_OUTCOME, TRAILER_EXIT, TRAILER_RUN, TRAILER_SPEC,
                           TRAILER_FIRST_STAGE):
            trailers[key] = value.strip()
        elif line.startswith("- "):
            body.append(line[2:])
    if TRAILER_JOB not in trailers or trailers.get(TRAILER_OUTCOME) not in OUTCOMES:
        return None
    try:
        code = int(trailers.get(TRAILER_EXIT, ""))
    except ValueError:
        return None
    return Result(trailers[TRAILER_JOB], trailers[TRAILER_OUTCOME], code, trailers.get(TRAILER_RUN),
                  commit, tuple(body), trailers.get(TRAILER_SPEC), trailers.get(TRAILER_FIRST_STAGE))


def message(job: str, outcome: str, code: int, run_id: str | None, reasons: Sequence[str] = (),
            spec: str | None = None, first_stage: str | None = None) -> str:
    lines = [f"job {job}: {outcome} (exit {code})", ""]
    if reasons:
        lines += [f"- {mask(r)}" for r in reasons] + [""]
    lines += [f"{TRAILER_JOB}: {job}", f"{TRAILER_OUTCOME}: {outcome}", f"{TRAILER_EXIT}: {code}"]
    if run_id:
        lines.append(f"{TRAILER_RUN}: {run_id}")
    if spec:
        lines.append(f"{TRAILER_SPEC}: {spec}")
    if first_stage:
        lines.append(f"{TRAILER_FIRST_STAGE}: {first_stage}")
    return "\n".join(lines) + "\n"


def read(repo: Repo, ref: str = "HEAD") -> Result | None:
    """The result at `ref`'s tip, or None."""
    commit = repo.try_rev(ref)
    if commit is None:
        return None
    return parse_message(repo.out("log", "-1", "--format=%B", commit), commit)


def strip(repo: Repo) -> int:
    """Drop result commits from the tip (a resumed or resent job records a new one); how many."""
    n = 0
    while True:
        r = read(repo)
        if r is None:
            return n
        parent = repo.try_rev("HEAD~1")
        if parent is None or repo.out("rev-parse", "HEAD^{tree}") != repo.out("rev-parse", parent + "^{tree}"):
            return n  # only ever an empty commit
        repo.git("reset", "-q", "--hard", parent)
        n += 1


def commit(repo: Repo, job: str, outcome: str, code: int, run_id: str | None, reasons: Sequence[str],
           spec: str | None = None, first_stage: str | None = None) -> str:
    strip(repo)
    repo.git("commit", "-q", "--allow-empty", "--no-verify", "-F", "-",
             input=message(job, outcome, code, run_id, reasons, spec, first_stage))
    return repo.rev("HEAD")
