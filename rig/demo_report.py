"""The demo's bookkeeping, as pure functions: step outcomes, the summary table, the exit code,
and which `nev` commands are still stubs (`not built yet (issue #N)`)."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

import click

PASSED = "passed"
FAILED = "failed"
NOT_BUILT = "not built"
PARTIAL = "partial"
SKIPPED = "skipped"


@dataclass
class StepResult:
    number: int
    name: str
    status: str = SKIPPED
    seconds: float = 0.0
    note: str = ""
    missing: list[int] = field(default_factory=list)   # issue numbers of the parts not built yet

    def line(self, elapsed: float) -> str:
        """The one progress line a finished step prints."""
        what = self.status
        if self.status in (NOT_BUILT, PARTIAL) and self.missing:
            what = ("not built yet" if self.status == NOT_BUILT else "partial, not built yet") + " (" + \
                ", ".join(f"issue #{n}" for n in sorted(set(self.missing))) + ")"
        tail = f": {self.note}" if self.note else ""
        return f"[{elapsed:6.1f} s] step {self.number} {self.name}: {what} in {self.seconds:.1f} s{tail}"


@dataclass
class Results:
    landed_commit: str | None = None
    main_after: str | None = None     # main of the primary checkout after the landing
    floors_commit: str | None = None  # the floors commit on top of it, when floors rose
    main_on_forge: str | None = None
    function: str = ""
    score: str | None = None          # "P/R"
    floor: str | None = None          # "P/R"
    floors_check: str | None = None   # the `nev floors check` line of the function
    ledger_line: str | None = None
    job_log: str | None = None
    rig_status: str | None = None
    dashboard_url: str | None = None
    missing: dict[str, list[int]] = field(default_factory=dict)   # result -> issues of its missing parts


def summary_table(steps: list[StepResult]) -> str:
    """Step, status, seconds: one row each, then the total and what did not run."""
    w = max((len(s.name) for s in steps), default=4)
    rows = [f"{'step':<{w + 3}}  {'status':<32}  seconds"]
    for s in steps:
        status = s.status
        if s.missing and s.status in (NOT_BUILT, PARTIAL):
            status += " (" + ", ".join(f"#{n}" for n in sorted(set(s.missing))) + ")"
        if s.status == FAILED:
            status += ": see below"
        rows.append(f"{s.number}. {s.name:<{w}}  {status:<32}  {s.seconds:7.1f}")
    total = sum(s.seconds for s in steps)
    rows.append(f"{'total':<{w + 3}}  {'':<32}  {total:7.1f}")
    ran = [s for s in steps if s.status == PASSED]
    rows.append(f"{len(ran)} of {len(steps)} steps ran and passed" + _not_all(steps))
    for s in steps:
        if s.status == FAILED and s.note:
            rows.append(f"step {s.number} failed: {s.note}")
    return "\n".join(rows)


def _not_all(steps: list[StepResult]) -> str:
    nb = sorted({n for s in steps if s.status in (NOT_BUILT, PARTIAL) for n in s.missing})
    parts = []
    if nb:
        parts.append("not built yet: " + ", ".join(f"issue #{n}" for n in nb))
    failed = [str(s.number) for s in steps if s.status == FAILED]
    if failed:
        parts.append("failed: step " + ", ".join(failed))
    skipped = [str(s.number) for s in steps if s.status == SKIPPED]
    if skipped:
        parts.append("did not run: step " + ", ".join(skipped))
    return "; " + "; ".join(parts) if parts else ""


def results_text(r: Results) -> str:
    def val(key: str, v: str | None) -> str:
        if v is not None:
            return v
        if key in r.missing:
            return "none: not built yet (" + ", ".join(f"issue #{n}" for n in sorted(set(r.missing[key]))) + ")"
        return "none"

    lines = [
        f"landed commit:      {val('landed', r.landed_commit)}",
        f"floors commit:      {r.floors_commit or 'none'}",
        f"main (primary):     {r.main_after or 'none'}",
        f"main on the forge:  {val('main', r.main_on_forge)}",
        f"{r.function or 'function'} score:  {val('score', r.score)}  floor: {val('floor', r.floor)}",
        f"floors check:       {val('floors_check', r.floors_check)}",
        f"ledger line:        {val('ledger', r.ledger_line)}",
        f"job archived log:   {val('job_log', r.job_log)}",
    ]
    if r.dashboard_url is not None or "dashboard" in r.missing:
        lines.append(f"dashboard:          {val('dashboard', r.dashboard_url)}")
    lines.append("rig status:")
    lines += ["  " + x for x in (r.rig_status or "(none)").splitlines()]
    return "\n".join(lines)


def exit_code(steps: list[StepResult]) -> int:
    """0 only when every step ran and passed."""
    return 0 if steps and all(s.status == PASSED for s in steps) else 1


_STUB = re.compile(r"raise\s+not_built\(\s*[\"'][^\"']*[\"']\s*,\s*(\d+)\s*\)")


def stub_issue(root: click.Group, *path: str) -> int | None:
    """The issue number when the `nev` command at `path` still raises not_built, else None.
    A command that does not exist at all counts as not built under `missing_issue`."""
    cmd: click.Command = root
    for p in path:
        if not isinstance(cmd, click.Group) or p not in cmd.commands:
            return -1
        cmd = cmd.commands[p]
    if cmd.callback is None:
        return None
    try:
        src = inspect.getsource(cmd.callback)
    except (OSError, TypeError):
        return None
    m = _STUB.search(src)
    return int(m.group(1)) if m else None


def missing_issues(root: click.Group, needs: list[tuple[tuple[str, ...], int]]) -> list[int]:
    """Issue numbers of the needed commands that are stubs (or absent: the part's own issue)."""
    out: list[int] = []
    for path, issue in needs:
        n = stub_issue(root, *path)
        if n is not None:
            out.append(issue if n < 0 else n)
    return sorted(set(out))
