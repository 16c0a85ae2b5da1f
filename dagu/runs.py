"""Running workflows on the lane's Dagu: run, watch, stop-run.

Parameters whose names look secret are refused before anything is sent, since
Dagu keeps a run's parameters on disk. A workflow with a top-level `queue:` (or a
DAG-level `workerSelector`, which only enqueued runs honour) is enqueued; any
other is started at once. A run is followed by reading its status every
NEV_DAGU_POLL (15) seconds until it ends or NEV_DAGU_WAIT seconds pass.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from dagu.api import DaguApi, DaguApiError, RunStatus, StepStatus, step_exit_code
from lanes.base.errors import NevError, UsageError
from lanes.base.exitcodes import Exit
from lanes.base.mask import is_secret_name

WORKFLOWS_DIR = Path(__file__).resolve().parent / "workflows"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")



class RunError(NevError):
    pass


# -- pure decisions ------------------------------------------------------

def parse_params(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """K=V pairs; a secret-looking name is refused (Dagu keeps parameters in its run records)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--param {item!r} is not K=V; give e.g. --param NAME=value")
        if not _PARAM_NAME.match(name):
            raise UsageError(f"--param {name!r}: a parameter name is letters, digits and _; nothing was sent")
        if is_secret_name(name):
            raise RunError(
                f"--param {name}: the name looks like a secret (KEY, TOKEN, SECRET, PASSWORD, PASSWD or "
                "CREDENTIAL) and Dagu keeps parameters on disk; steps read the gateway key from "
                "$DAGU_HOME/model-key instead; nothing was sent")
        out[name] = value
    return out


@dataclass(frozen=True)
class Workflow:
    name: str
    text: str
    doc: dict[str, object]      # the workflow's YAML as read (sent as its text; only its keys read)

    @property
    def enqueue(self) -> bool:
        return "queue" in self.doc or "workerSelector" in self.doc


def load_workflow(ref: str) -> Workflow:
    """A workflow file here, or the name of one shipped in dagu/workflows/."""
    p = Path(ref)
    if not p.is_file():
        shipped = WORKFLOWS_DIR / (ref if ref.endswith((".yaml", ".yml")) else ref + ".yaml")
        if "/" in ref or not shipped.is_file():
            names = sorted(x.stem for x in WORKFLOWS_DIR.glob("*.yaml"))
            raise UsageError(f"workflow {ref!r}: no such file, and not one of the shipped workflows "
                             f"({', '.join(names)}); nothing was sent")
        p = shipped
    name = p.name.rsplit(".", 1)[0] if p.suffix in (".yaml", ".yml") else p.name
    if not _NAME.match(name):
        raise UsageError(f"workflow file name {p.name!r}: use letters, digits, '_', '-' or '.'; nothing was sent")
    text = p.read_text(encoding="utf-8")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UsageError(f"{p}: not valid YAML ({str(e).splitlines()[0]}); nothing was sent") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{p}: a workflow is a YAML mapping with steps; nothing was sent")
    return Workflow(name=name, text=text, doc=doc)


def describe_step(s: StepStatus) -> str:
    code = step_exit_code(s)
    tail = f" (exit {code})" if s.status in ("succeeded", "failed", "aborted") else ""
    err = f": {s.error}" if s.error and s.status != "succeeded" else ""
    return f"step {s.name}: {s.status}{tail}{err}"


def run_json(st: RunStatus) -> dict[str, object]:
    """A run as `nev dagu run|watch --json` print it: its status, times and steps (each step's
    exit code once it ended: 0, N, or - for a signal)."""
    return {"run_id": st.run_id, "workflow": st.name, "status": st.status, "done": st.done,
            "started_at": st.started_at, "finished_at": st.finished_at,
            "steps": [{"name": s.name, "status": s.status, "error": s.error,
                       "exit": step_exit_code(s) if s.done else None} for s in st.steps]}


def run_exit_code(status: RunStatus) -> int:
    return Exit.OK if status.status == "succeeded" else Exit.FAILED


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one moment (an end at t closes before a start at t)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


# -- following a run ------------------------------------------------------

LOST_GRACE_S = 15.0  # follow: how long a run may be unknown to Dagu before that is an error


def follow(api: DaguApi, name: str, run_id: str, wait: float, poll: float,
           out: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> RunStatus:
    """Read the run's status every `poll` s, printing each step once it ends, until it ends or `wait` passes."""
    deadline = time.monotonic() + wait
    said: set[str] = set()
    last = ""
    gone = 0.0  # how long Dagu has not known the run, read after read
    while True:
        try:
            st = api.status(name, run_id)
        except DaguApiError as e:
            # A distributed Dagu 1.30.2 moves a queued run to its worker and, for a moment, answers
            # 404 for it (seen on the box's two lanes): a run known a moment ago is read again.
            if e.status != 404 or gone >= LOST_GRACE_S:
                raise
            step = min(poll, 0.5)
            sleep(step)
            gone += step
            continue
        gone = 0.0
        if st.status != last:
            out(f"run {run_id}: {st.status}")
            last = st.status
        for s in st.steps:
            if s.done and s.name not in said:
                said.add(s.name)
                out(describe_step(s))
        if st.done:
            return st
        left = deadline - time.monotonic()
        if left <= 0:
            return st
        sleep(min(poll, left))


def _recorded(api: DaguApi, name: str, run_id: str, wait: float, sleep: Callable[[float], None]) -> bool:
    deadline = time.monotonic() + wait
    while True:
        try:
            api.status(name, run_id)
            return True
        except DaguApiError as e:
            if e.status != 404:
                raise
        if time.monotonic() >= deadline:
            return False
        sleep(0.5)


def submit(api: DaguApi, wf: Workflow, params: dict[str, str], confirm_wait: float = 10.0,
           sleep: Callable[[float], None] = time.sleep,
           say: Callable[[str], None] | None = None) -> tuple[str, bool]:
    """Start or enqueue; (run id, enqueued).

    Dagu 1.30.2 can answer an enqueue with a run id and then keep no record of it when several
    arrive at once (seen with four simultaneous submissions on a loaded lane): the run would
    silently never happen. So an enqueued run is confirmed by reading it back, and enqueued once
    more, with a line saying so, when Dagu does not know it.
    """
    if not wf.enqueue:
        return api.start(wf.name, params), False
    run_id = api.enqueue(wf.name, params)
    if _recorded(api, wf.name, run_id, confirm_wait, sleep):
        return run_id, True
    if say is not None:
        say(f"Dagu lost enqueued run {run_id} of {wf.name} (no record after {confirm_wait:.0f} s); enqueuing again")
    run_id = api.enqueue(wf.name, params)
    if _recorded(api, wf.name, run_id, confirm_wait, sleep):
        return run_id, True
    raise RunError(f"Dagu answered an enqueue of {wf.name} twice but keeps no record of either run; "
                   "check the lane's Dagu (`nev dagu status`) and submit again", Exit.FAILED)


def watch_once_step(api: DaguApi, run_id: str, step: str) -> tuple[str, StepStatus]:
    st = api.find_run(run_id)
    s = st.step(step)
    if not s.done:
        raise RunError(f"step {step} of run {run_id} has not ended (it is {s.status or 'not started'}); "
                       "ask again later", Exit.FAILED)
    return step_exit_code(s), s
