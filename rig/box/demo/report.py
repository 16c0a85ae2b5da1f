"""The demo's bookkeeping, as pure functions: step outcomes, the summary table, the exit code."""

from __future__ import annotations

from dataclasses import dataclass

PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"


@dataclass
class StepResult:
    number: int
    name: str
    status: str = SKIPPED
    seconds: float = 0.0
    note: str = ""

    def line(self, elapsed: float) -> str:
        """The one progress line a finished step prints."""
        tail = f": {self.note}" if self.note else ""
        return f"[{elapsed:6.1f} s] step {self.number} {self.name}: {self.status} in {self.seconds:.1f} s{tail}"


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
    announcement: str | None = None   # the landing's, as it printed it
    posted: str | None = None         # what the chat receiver got (Discord's form), checked
    job_log: str | None = None
    rig_status: str | None = None
    dashboard_url: str | None = None


def summary_table(steps: list[StepResult], wall: float | None = None) -> str:
    """Step, status, seconds: one row each, then the total and what did not pass. `wall`: the
    demo's wall time, the total when some steps ran beside others (their own times then add up
    to more, said on the next row)."""
    w = max((len(s.name) for s in steps), default=4)
    rows = [f"{'step':<{w + 3}}  {'status':<32}  seconds"]
    for s in steps:
        status = s.status + (": see below" if s.status == FAILED else "")
        rows.append(f"{s.number}. {s.name:<{w}}  {status:<32}  {s.seconds:7.1f}")
    own = sum(s.seconds for s in steps)
    total = own if wall is None else wall
    rows.append(f"{'total':<{w + 3}}  {'':<32}  {total:7.1f}")
    if own > total + 0.05:
        rows.append(f"(the steps' own times add up to {own:.1f} s: some ran beside others)")
    ran = [s for s in steps if s.status == PASSED]
    rows.append(f"{len(ran)} of {len(steps)} steps ran and passed" + _not_all(steps))
    for s in steps:
        if s.status == FAILED and s.note:
            rows.append(f"step {s.number} failed: {s.note}")
    return "\n".join(rows)


def _not_all(steps: list[StepResult]) -> str:
    parts = []
    failed = [str(s.number) for s in steps if s.status == FAILED]
    if failed:
        parts.append("failed: step " + ", ".join(failed))
    skipped = [str(s.number) for s in steps if s.status == SKIPPED]
    if skipped:
        parts.append("did not run: step " + ", ".join(skipped))
    return "; " + "; ".join(parts) if parts else ""


def results_text(r: Results) -> str:
    lines = [
        f"landed commit:      {r.landed_commit or 'none'}",
        f"floors commit:      {r.floors_commit or 'none'}",
        f"main (primary):     {r.main_after or 'none'}",
        f"main on the forge:  {r.main_on_forge or 'none'}",
        f"{r.function or 'function'} score:  {r.score or 'none'}  floor: {r.floor or 'none'}",
        f"floors check:       {r.floors_check or 'none'}",
        f"ledger line:        {r.ledger_line or 'none'}",
        f"announcement:       posted in Discord's form: {r.posted or 'nothing'}",
        f"job archived log:   {r.job_log or 'none'}",
    ]
    if r.dashboard_url is not None:
        lines.append(f"dashboard:          {r.dashboard_url}")
    lines += ["  " + x for x in (r.announcement or "(none printed)").splitlines()]
    lines.append("rig status:")
    lines += ["  " + x for x in (r.rig_status or "(none)").splitlines()]
    return "\n".join(lines)


def exit_code(steps: list[StepResult]) -> int:
    """0 only when every step ran and passed."""
    return 0 if steps and all(s.status == PASSED for s in steps) else 1
