"""`nev lane writer`: a writer started in a worktree's lane copy, its commits fetched back, writers listed.

A writer is a model session through a harness the operator declares (`jobs.writer.lane_harness`
resolves it from tracks.json or TRACKS_TOOL; no harness is named here). `start` syncs the
worktree into the lane copy the gate's way (bundle, diff, untracked files, `.env`) and the lane
agent starts the harness detached on the writer's branch (`lanes/agent/writer.py`); `fetch`
brings its commits back as a bundle and moves the worktree's branch fast-forward only
(`decide_fetch`); `stop` ends a writer's process tree on its lane (its commits kept for `fetch`,
its `.env` removed); `status` lists every lane's writers.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from lanes import dotenv, gate, lanesfile, payload
from lanes.agent.layout import ENV
from lanes.agent.messages import (
    HarnessCheckout,
    NoWriter,
    Refusal,
    WriterFetchedRequest,
    WriterFetchedResult,
    WriterFetchRequest,
    WriterFetchResult,
    WriterRow,
    WriterSpec,
    WriterState,
    WriterStatusRequest,
    WriterStatusResult,
    WriterStopRequest,
    WriterStopResult,
    writer_answer,
)
from lanes.agent.wire import Kind
from lanes.base import ui
from lanes.base.errors import NevError, NoLaneError
from lanes.base.gitrun import Repo
from lanes.base.mask import is_secret_name, mask
from lanes.base.ssh import SshError
from lanes.forge import forge_for
from lanes.lanesfile import Lane
from lanes.session import Session, call, call_with

CALL_TIMEOUT = 60.0
FETCH_REF = "refs/nev/writer/"   # + worktree name: the lane's tip as last fetched here, kept when refused


@dataclass(frozen=True)
class Harness:
    """The declared harness: its name (`--tool`) and the writer command that starts it."""

    tool: str
    launch: str


class Fetch(str, Enum):  # noqa: UP042
    UP_TO_DATE = "up-to-date"
    FAST_FORWARD = "fast-forward"
    DIVERGED = "diverged"


def decide_fetch(head: str, tip: str, head_in_tip: bool, tip_in_head: bool) -> Fetch:
    """What a fetch does with the writer's `tip` and the worktree's `head` (pure).

    | the writer's tip | fetch |
    |---|---|
    | the worktree's HEAD, or already in its history | up to date: nothing moves |
    | HEAD is in its history | fast-forward the branch to it |
    | otherwise (each side has commits the other lacks) | refused, the commits named |
    """
    if tip == head or tip_in_head:
        return Fetch.UP_TO_DATE
    if head_in_tip:
        return Fetch.FAST_FORWARD
    return Fetch.DIVERGED


def _branch(wt: payload.Worktree) -> str:
    branch = wt.repo.branch()
    if branch is None:
        raise NevError(f"{wt.path} is on no branch (detached HEAD); check out the branch the writer commits to")
    return branch


@dataclass(frozen=True)
class Started:
    """A writer started: its lane, its record there and the harness checkout's update."""

    lane: Lane
    state: WriterState
    harness: HarnessCheckout | None = None


class EndedAtOnce(NevError):
    """The writer ended within the settle time: the start failed. `tail`: its log's last lines,
    masked; `harness`: the harness checkout's update, which stays done."""

    def __init__(self, message: str, tail: str, harness: HarnessCheckout | None) -> None:
        super().__init__(message)
        self.tail = tail
        self.harness = harness


def harness_line(h: HarnessCheckout) -> str:
    """`harness at <sha> (updated from <sha>)`, `... (unchanged)`, or that there is no checkout."""
    if h.after is None:
        return f"harness: no checkout at {h.path}, nothing updated"
    if h.before == h.after:
        return f"harness at {h.after[:12]} (unchanged)"
    return f"harness at {h.after[:12]} (updated from {(h.before or '?')[:12]})"


@dataclass(frozen=True)
class Fetched:
    """What `fetch` did: the writer's tip here, the commits fast-forwarded (none: up to date)."""

    lane: Lane
    action: Fetch
    tip: str
    commits: list[str]
    running: bool         # the writer still runs on the lane
    exit: int | None


@dataclass(frozen=True)
class StoppedWriter:
    """The writer after `stop`, its log's last lines masked here too."""

    lane: Lane
    writer: WriterStopResult


@dataclass(frozen=True)
class LaneWriters:
    """One lane's writers for `nev lane writer status`; `error` when it did not answer."""

    lane: Lane
    writers: list[WriterRow]
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        """The row `nev lane writer status --json` prints."""
        row: dict[str, object] = {"index": self.lane.index, "label": self.lane.label,
                                  "answers": self.error is None,
                                  "writers": [w.to_wire() for w in self.writers]}
        if self.error is not None:
            row["error"] = self.error
        return row


def start(worktree: Path, *, lane_index: int, model: str, brief: Path, harness: Harness) -> Started:
    """Sync `worktree` to lane `lane_index`'s copy and start the writer there; its record on the lane.
    Refused (by the lane) while a writer runs in that copy, over a dead writer's unfetched commits,
    or when the harness checkout cannot be updated fast-forward; EndedAtOnce when the writer ends
    within NEV_WRITER_SETTLE_S."""
    wt = payload.Worktree.open(worktree)
    branch = _branch(wt)
    try:
        text = brief.read_text(encoding="utf-8")
    except OSError as e:
        raise NevError(f"{brief}: cannot read the brief ({e.strerror})") from None
    gate.writer_settle()          # a bad NEV_WRITER_SETTLE_S is said before any lane is asked
    lf = lanesfile.configured()
    picked = gate.pick_lane(lf, lane_index)
    if picked is None:
        raise NoLaneError(f"lane {lane_index} does not answer; no writer started")
    lane, conn = picked
    spec = WriterSpec(branch=branch, tool=harness.tool, model=model, launch=harness.launch,
                      brief=text)
    try:
        out = gate.gate_on_lane(lane, conn, wt, [], forge=forge_for(wt.repo, lf), writer=spec)
    finally:
        conn.close()
    res = out.result
    rec, ended = res.writer, res.writer_ended
    if ended is not None:
        how = f"exited {ended.exit}" if ended.exit is not None else "ended without an exit status"
        raise EndedAtOnce(f"{lane.label}: the writer of {wt.name} {how} within "
                          f"{gate.writer_settle():g} s of its start: the start failed; "
                          f"its log is {ended.log} on the lane (`nev lane writer status`)",
                          mask(ended.log_tail, extra=_env_secrets(wt)), res.harness)
    if rec is None:
        raise NevError(f"{lane.label} started no writer (status {out.status})")
    return Started(lane, rec, res.harness)


@dataclass
class _Found:
    lane: Lane
    result: WriterFetchResult
    bundle: bytes


def _fetch_answer(data: bytes) -> WriterFetchResult | NoWriter | Refusal:
    return writer_answer(data, WriterFetchResult)


def _stop_answer(data: bytes) -> WriterStopResult | NoWriter | Refusal:
    return writer_answer(data, WriterStopResult)


def _ask(lane: Lane, name: str, have: list[str]) -> _Found | None:
    """The lane's writer of `name`: its record and a bundle of the commits `have` lacks; None when it has none."""
    with lane.connect() as conn:
        s = Session(conn, lane)
        data = bytearray()
        res: WriterFetchResult | NoWriter | Refusal | None = None
        try:
            s.request(WriterFetchRequest(root=lane.root, name=name, have=have))
            for kind, chunk in s.frames(CALL_TIMEOUT):
                if kind is Kind.WRITER_BUNDLE:
                    data += chunk
                elif kind is Kind.MESSAGE:
                    ui.info(f"{lane.label}: {chunk.decode(errors='replace')}")
                elif kind is Kind.RESULT:
                    res = s.decode(chunk, _fetch_answer)
                    break
        finally:
            s.close()
    if res is None:
        raise NevError(f"{lane.label}: the lane agent gave no answer to 'writer-fetch' within {CALL_TIMEOUT:g} s")
    if isinstance(res, Refusal):
        raise NevError(f"{lane.label} refused the fetch: {res.refused}")
    return None if isinstance(res, NoWriter) else _Found(lane, res, bytes(data))


def _find(lanes: list[Lane], name: str, have: list[str]) -> _Found:
    for lane in lanes:
        try:
            found = _ask(lane, name, have)
        except SshError as e:
            ui.info(f"{lane.label} does not answer: {mask(str(e))}")
            continue
        if found is not None:
            return found
    raise NevError(f"no lane that answered has a writer of {name}; nothing fetched")


def _take(repo: Repo, found: _Found, name: str) -> str:
    """The lane's tip here, at FETCH_REF + name; its commit."""
    res, ref = found.result, FETCH_REF + name
    if not found.bundle:
        if repo.try_rev(res.tip) is None:
            raise NevError(f"{found.lane.label}: sent no commits, yet its tip {res.tip[:12]} "
                           "is not here")
        repo.set_ref(ref, res.tip)
        return res.tip
    with tempfile.NamedTemporaryFile(suffix=".bundle") as f:
        f.write(found.bundle)
        f.flush()
        return repo.fetch_bundle(Path(f.name), res.ref, ref)


def fetch(worktree: Path, lane_index: int | None = None) -> Fetched:
    """The writer's commits into `worktree`'s branch, fast-forward only; anything else refused
    with the commits named (the lane's tip kept at FETCH_REF + name)."""
    wt = payload.Worktree.open(worktree)
    branch = _branch(wt)
    repo = wt.repo
    found = _find(lanesfile.pick(lanesfile.configured(), lane_index), wt.name,
                  [wt.commit, *payload.remote_tips(repo)])
    res, label = found.result, found.lane.label
    if res.branch != branch:
        raise NevError(f"the writer of {wt.name} on {label} commits to {res.branch}, but {wt.path} is on "
                       f"{branch}; check out {res.branch} to fetch (nothing fetched)")
    tip = _take(repo, found, wt.name)
    head = wt.commit
    action = decide_fetch(head, tip, repo.is_ancestor(head, tip), repo.is_ancestor(tip, head))
    if action is Fetch.DIVERGED:
        theirs, ours = repo.oneline(tip, head), repo.oneline(head, tip)
        raise NevError(f"the writer's branch on {label} diverged from {branch} here; nothing fetched. "
                       f"On the lane only: {'; '.join(theirs)}. Here only: {'; '.join(ours)}. "
                       f"The lane's tip is kept at {FETCH_REF}{wt.name}")
    commits = repo.oneline(tip, head) if action is Fetch.FAST_FORWARD else []
    if action is Fetch.FAST_FORWARD:
        repo.fast_forward(tip)
    with found.lane.connect() as conn:
        done = WriterFetchedRequest(root=found.lane.root, name=wt.name, tip=tip)
        call(conn, found.lane, done, CALL_TIMEOUT, WriterFetchedResult)
    return Fetched(found.lane, action, tip, commits, res.running, res.exit)


def stop(worktree: Path, lane_index: int | None = None) -> StoppedWriter:
    """Stop the writer of `worktree`'s lane copy (its process tree), its `.env` removed on the lane
    and its commits kept for `fetch`; its status row, the log's last lines masked here too (the
    worktree's `.env` secret-named values, and whatever `lanes.base.mask` knows)."""
    wt = payload.Worktree.open(worktree)
    secrets = _env_secrets(wt)
    for lane in lanesfile.pick(lanesfile.configured(), lane_index):
        try:
            with lane.connect() as conn:
                req = WriterStopRequest(root=lane.root, name=wt.name)
                ans = call_with(conn, lane, req, CALL_TIMEOUT, _stop_answer)
        except SshError as e:
            ui.info(f"{lane.label} does not answer: {mask(str(e))}")
            continue
        if not isinstance(ans, WriterStopResult):   # NoWriter: this lane has none
            continue
        masked = dataclasses.replace(ans, log_tail=mask(ans.log_tail, extra=secrets))
        return StoppedWriter(lane, masked)
    raise NevError(f"no lane that answered has a writer of {wt.name}; nothing stopped")


def _env_secrets(wt: payload.Worktree) -> list[str]:
    """The secret-named values of the worktree's `.env`, masked in what a lane sends back."""
    env_file = wt.path / ENV
    if not env_file.is_file():
        return []
    return [v for k, v in dotenv.read(env_file).items() if v and is_secret_name(k)]


def status(lane_index: int | None = None) -> list[LaneWriters]:
    """Every configured lane (or lane `lane_index`) and its writers; a lane that does not answer says why."""
    rows = []
    for lane in lanesfile.pick(lanesfile.configured(), lane_index):
        try:
            with lane.connect() as conn:
                ans = call(conn, lane, WriterStatusRequest(root=lane.root), CALL_TIMEOUT,
                           WriterStatusResult)
            rows.append(LaneWriters(lane, ans.writers))
        except NevError as e:
            rows.append(LaneWriters(lane, [], mask(str(e))))
    return rows


def state_word(w: WriterRow) -> str:
    """A writer's state in a few words: `running`, `exited N`, `stopped at T (exit N)`, `gone`
    (ended without an exit status)."""
    if w.running:
        return "running"
    if w.stopped:
        return f"stopped at {w.stopped}" + (f" (exit {w.exit})" if w.exit is not None else "")
    return f"exited {w.exit}" if w.exit is not None else "gone (no exit status: killed?)"
