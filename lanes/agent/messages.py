"""Every message on the agent's wire as a dataclass, shared by both ends: `to_wire()` gives the JSON
object a frame carries, `from_wire()` takes one back, each field checked against its annotation.

The agent is sent by its content hash, so both ends always hold this same module: a field the
other end does not know, a missing one or one of another type is a ProtocolError (one line:
`protocol error: the 'hello' request's 'root' is a int, not a str`), never a KeyError later.

| op (request) | request | RESULT (or the frame named) |
|---|---|---|
| `hello` | `Hello` | HELLO: `HelloAnswer` |
| `payload` | `Payload` | NEED_BUNDLE: `NeedBundle`, PULL_START: `PullStart`; RESULT: `GateResult` |
| `writer-start` | `WriterStart` | RESULT: `GateResult` (`writer`, `harness`, `writer_ended`) |
| `bundle`, `stop`, `abort` | `Bundle`, `StopRun`, `Abort` | (the run goes on, stops, ends) |
| `status` | `StatusRequest` | `StatusResult` |
| `cleanup` | `CleanupRequest` | `CleanupResult` |
| `survey` | `SurveyRequest` | `SurveyResult` (`SurveyEntry`, `WriterFacts`) |
| `remove` | `RemoveRequest` | `RemoveResult` |
| `archives` | `ArchivesRequest` | `ArchivesResult` (`ArchiveEntry`) |
| `drop-archives` | `DropArchivesRequest` (`ArchiveRef`) | `DropArchivesResult` |
| `prune-refs` | `PruneRefsRequest` | `PruneRefsResult` (`MirrorPrune`) |
| `writer-status` | `WriterStatusRequest` | `WriterStatusResult` (`WriterRow`) |
| `writer-fetch` | `WriterFetchRequest` | `WriterFetchResult`, or `NoWriter` |
| `writer-fetched` | `WriterFetchedRequest` | `WriterFetchedResult` |
| `writer-stop` | `WriterStopRequest` | `WriterStopResult`, or `NoWriter` |

Any RESULT but a gate's may be a `Refusal` instead; a field with a default may be left out. The
checks are `lanes/agent/wiretypes.py`'s. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lanes.agent.wire import Kind, Op, Stop, Wire
from lanes.agent.wiretypes import (
    M,
    Message,
    Request,
    _json,
    _names,
    _request,
)


def send(wire: Wire, kind: Kind, msg: Message) -> None:
    wire.send_json(kind, msg.to_wire())


# -- the gate ----------------------------------------------------------------------------------

@dataclass(repr=False, eq=False)
class Cred(Message):
    """The forge credential a lane's git uses (never in argv: `lanes.agent.git.credential_env`)."""

    WHAT = "the credential"
    user: str
    password: str

    @classmethod
    def of(cls, d: dict[str, str] | None) -> Cred | None:
        """The forge's `lane_cred()` ({"user", "password"}, None without a token) as a Cred."""
        return cls(d["user"], d["password"]) if d else None


@_request
@dataclass(repr=False, eq=False)
class Hello(Request):
    """A gate's first request: which copy, where, and the lane's fetch and disk policy."""

    OP = Op.HELLO
    name: str
    root: str
    shared: str
    git_url: str | None
    fetch_max_age: float
    min_free_gb: float


@dataclass(repr=False, eq=False)
class CopySize(Message):
    WHAT = "a copy's size"
    name: str
    kb: int


@dataclass(repr=False, eq=False)
class HelloAnswer(Message):
    """The HELLO frame: the mirror's tips and fetch age, the free disk (the copies when short)."""

    WHAT = "the lane's hello"
    pid: int
    mirror: bool
    tips: list[str]
    fetch_age: float | None
    free_gb: float
    guest: str
    python: str
    copies: list[CopySize] | None = None
    # Where the gate's and a writer's jails are built (`lanes.base.gatejail`): the lane root, the
    # home and the share, resolved on the lane; bubblewrap's path there (None: not installed).
    root: str = ""
    home: str = ""
    shared: str | None = None
    bwrap: str | None = None
    harness: str = ""   # a writer's harness checkout there (PI_TRACKS_HOME, else the default)


@_request
@dataclass(repr=False, eq=False)
class Payload(Request):
    """After HELLO: run `command` on the commit; the members (`sizes`, bytes) follow the request."""

    OP = Op.PAYLOAD
    commit: str
    sizes: dict[str, int]
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cred: Cred | None = None
    keep_env: bool = False
    pull: list[str] = field(default_factory=list)
    # bubblewrap's options for the gate's own jail (`lanes.base.sandbox.gate_jail_args`): the
    # command runs as `<bwrap> JAIL -- COMMAND`; empty only for a caller that builds none.
    jail: list[str] = field(default_factory=list)


@dataclass(repr=False, eq=False)
class WriterSpec(Message):
    """The writer to start: its branch, the declared harness (`tool`, `launch`), model and brief."""

    WHAT = "the writer"
    branch: str
    tool: str
    model: str
    launch: str
    brief: str


@_request
@dataclass(repr=False, eq=False)
class WriterStart(Request):
    """After HELLO: a writer started in the copy synced to the commit (members follow, as a
    payload's)."""

    OP = Op.WRITER_START
    commit: str
    sizes: dict[str, int]
    writer: WriterSpec
    env: dict[str, str] = field(default_factory=dict)
    cred: Cred | None = None
    settle_s: float = 2.0     # how long the agent watches the writer before it answers
    # bubblewrap's options for the writer's jail (`lanes.base.gatejail.writer_jail_args`): the
    # agent runs `<bwrap> JAIL -- LAUNCH ...`; a start without one is refused.
    jail: list[str] = field(default_factory=list)


@_request
@dataclass(repr=False, eq=False)
class Bundle(Request):
    """After NEED_BUNDLE: another bundle, `size` raw bytes after the request."""

    OP = Op.BUNDLE
    size: int


@_request
@dataclass(repr=False, eq=False)
class StopRun(Request):
    OP = Op.STOP
    signal: Stop = Stop.TERM


@_request
@dataclass(repr=False, eq=False)
class Abort(Request):
    """After HELLO: nothing runs (the disk guard said no)."""

    OP = Op.ABORT


@dataclass(repr=False, eq=False)
class NeedBundle(Message):
    WHAT = "the NEED_BUNDLE frame"
    tips: list[str]


@dataclass(repr=False, eq=False)
class PullStart(Message):
    WHAT = "the PULL_START frame"
    dir: str


@dataclass(repr=False, eq=False)
class WriterState(Message):
    """A writer's record (`state.json` in its folder on the lane), as started and as stopped."""

    WHAT = "a writer's record"
    pid: int
    ticks: int | None
    started: str
    branch: str
    ref: str
    base: str
    tool: str
    model: str
    brief: str
    log: str
    stopped: str | None = None


@dataclass(repr=False, eq=False)
class HarnessCheckout(Message):
    """The harness checkout before a writer's start: its commit before and after the fast-forward
    (both None: no checkout at `path`, nothing updated)."""

    WHAT = "the harness checkout"
    path: str
    before: str | None = None
    after: str | None = None


@dataclass(repr=False, eq=False)
class WriterEnded(Message):
    """A writer that ended within the settle time: a failed start. Its exit status (None: killed
    before its wrapper wrote one), its log and the log's last lines (masked as written)."""

    WHAT = "the writer that ended at once"
    exit: int | None
    log: str
    log_tail: str


@dataclass(repr=False, eq=False)
class GateResult(Message):
    """A gate's RESULT: the command's status (None when it never ran) and how the run went."""

    WHAT = "the gate's result"
    status: int | None = None
    refused: str | None = None
    stopped: Stop | None = None
    aborted: bool = False
    prepare_s: float | None = None
    log: str | None = None
    writer: WriterState | None = None
    writer_ended: WriterEnded | None = None
    harness: HarnessCheckout | None = None
    env_removed: bool = False
    maxrss_kb: int | None = None
    command_maxrss_kb: int | None = None


@dataclass(repr=False, eq=False)
class Refusal(Message):
    """The RESULT of any request the agent refused: the one line why."""

    WHAT = "the lane's refusal"
    refused: str


# -- one-call operations on the lane root ------------------------------------------------------

@_request
@dataclass(repr=False, eq=False)
class StatusRequest(Request):
    OP = Op.STATUS
    root: str


@dataclass(repr=False, eq=False)
class StatusResult(Message):
    """`nev lane list`: free disk (None: no root yet), copies present, gates running."""

    WHAT = "the lane's status"
    guest: str
    root: str
    free_gb: float | None
    copies: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)


@_request
@dataclass(repr=False, eq=False)
class CleanupRequest(Request):
    """After a dropped connection: stop `pid` (the agent of the gate), remove the `.env` files."""

    OP = Op.CLEANUP
    root: str
    name: str
    pid: int | None = None
    keep_env: bool = False
    wait: float = 5.0


@dataclass(repr=False, eq=False)
class CleanupResult(Message):
    WHAT = "the cleanup's result"
    removed: list[str] = field(default_factory=list)
    busy: bool = False


@_request
@dataclass(repr=False, eq=False)
class SurveyRequest(Request):
    OP = Op.SURVEY
    root: str
    busy: list[str] = field(default_factory=list)
    nas: str | None = None


@dataclass(repr=False, eq=False)
class SurveyEntry(Message):
    """What the survey found for one name under the lane root (`lanes.sweep.decide` reads it)."""

    WHAT = "a survey entry"
    name: str
    copy: bool = True
    payload: bool = False
    dir: bool = True
    worktree: bool = True
    symlink: bool = False
    size: int = 0
    pids: tuple[tuple[int, str], ...] = ()
    busy: tuple[tuple[int, str], ...] = ()
    locked: bool = False
    corpus: tuple[str, ...] = ()


@dataclass(repr=False, eq=False)
class WriterFacts(Message):
    """What the survey found for one writer record (`<root>/.writer-<name>/`)."""

    WHAT = "a writer record's facts"
    name: str
    record: bool          # its state.json is readable
    copy: bool            # its copy `<root>/<name>` is there
    running: bool
    unfetched: tuple[str, ...] = ()


@dataclass(repr=False, eq=False)
class InstallFacts(Message):
    """One of the lane's nev installs (`lanes/agent/installs.py`; `lanes.sweep.decide_installs`)."""

    WHAT = "a nev install's facts"
    name: str
    kind: str          # install | tmp (being built) | gone (being removed) | legacy (the old venv)
    current: bool
    pids: tuple[tuple[int, str], ...] = ()
    chosen: float = 0.0      # when it was last made current
    building: bool = False   # an install holds the lane's install lock


@dataclass(repr=False, eq=False)
class SurveyResult(Message):
    WHAT = "the survey"
    root: str
    mirror: bool
    entries: list[SurveyEntry]
    writers: list[WriterFacts]
    free_gb: float
    nas: bool
    agents: list[str]
    peak_rss_kb: dict[str, int]
    installs: list[InstallFacts] = field(default_factory=list)
    agent_ages: dict[str, float] = field(default_factory=dict)   # seconds since last used


@_request
@dataclass(repr=False, eq=False)
class RemoveRequest(Request):
    OP = Op.REMOVE
    root: str
    names: list[str]
    stamp: str
    nas: str | None = None
    agents: list[str] = field(default_factory=list)
    writers: list[str] = field(default_factory=list)
    installs: list[str] = field(default_factory=list)


@dataclass(repr=False, eq=False)
class RemoveResult(Message):
    """Per copy its archive ("" when nothing was archived) or why it was kept; the same for cached
    agents and writer records."""

    WHAT = "the removal's result"
    removed: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    agents_removed: list[str] = field(default_factory=list)
    agents_failed: dict[str, str] = field(default_factory=dict)
    writers_removed: list[str] = field(default_factory=list)
    writers_failed: dict[str, str] = field(default_factory=dict)
    installs_removed: list[str] = field(default_factory=list)
    installs_failed: dict[str, str] = field(default_factory=dict)


# -- retention (`lanes.agent.retention`) -------------------------------------------------------

@_request
@dataclass(repr=False, eq=False)
class ArchivesRequest(Request):
    OP = Op.ARCHIVES
    shared: str


@dataclass(repr=False, eq=False)
class ArchiveEntry(Message):
    """One entry of the share's archive folders (or of the corpus store)."""

    WHAT = "an archive entry"
    kind: str    # gate-logs | job-logs | corpus | corpora (the oracle's corpus store)
    name: str    # the worktree or job it belongs to (for the store: the corpus's function)
    entry: str   # a log file, a Dagu run's folder, a corpus tar, a store entry
    mtime: float
    size: int = 0

    @property
    def label(self) -> str:
        if self.kind == "corpora":
            return f"corpora/{self.entry}"
        return f"archive/{self.kind}/{self.name}/{self.entry}"


@dataclass(repr=False, eq=False)
class ArchivesResult(Message):
    WHAT = "the archives"
    entries: list[ArchiveEntry]


@dataclass(repr=False, eq=False)
class ArchiveRef(Message):
    WHAT = "an archive entry's name"
    kind: str
    name: str
    entry: str


@_request
@dataclass(repr=False, eq=False)
class DropArchivesRequest(Request):
    OP = Op.DROP_ARCHIVES
    shared: str
    entries: list[ArchiveRef]


@dataclass(repr=False, eq=False)
class DropArchivesResult(Message):
    WHAT = "the archives' removal"
    removed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


@_request
@dataclass(repr=False, eq=False)
class PruneRefsRequest(Request):
    OP = Op.PRUNE_REFS
    git_url: str
    mirrors: list[str]
    cred: Cred | None = None


@dataclass(repr=False, eq=False)
class MirrorPrune(Message):
    """One mirror's pruning: missing, or the refs pruned and those kept (and why)."""

    WHAT = "a mirror's pruning"
    missing: bool = False
    pruned: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


@dataclass(repr=False, eq=False)
class PruneRefsResult(Message):
    WHAT = "the pruning"
    mirrors: dict[str, MirrorPrune]


# -- writers (`lanes.agent.writer`) ------------------------------------------------------------

@dataclass(repr=False, eq=False)
class WriterRow(Message):
    """One writer as `nev lane writer status` shows it."""

    WHAT = "a writer"
    name: str
    branch: str
    ref: str
    tool: str
    model: str
    pid: int
    started: str
    running: bool
    exit: int | None
    log: str
    stopped: str | None
    unfetched: list[str]


@dataclass(repr=False, eq=False)
class NoWriter(Message):
    """The answer to `writer-fetch` or `writer-stop` when the copy has no writer record."""

    WHAT = "the lane's answer"
    none: bool = True


@_request
@dataclass(repr=False, eq=False)
class WriterStatusRequest(Request):
    OP = Op.WRITER_STATUS
    root: str


@dataclass(repr=False, eq=False)
class WriterStatusResult(Message):
    WHAT = "the writers' status"
    writers: list[WriterRow]


@_request
@dataclass(repr=False, eq=False)
class WriterFetchRequest(Request):
    """A bundle of the writer's branch without the commits of `have`."""

    OP = Op.WRITER_FETCH
    root: str
    name: str
    have: list[str]


@dataclass(repr=False, eq=False)
class WriterFetchResult(WriterRow):
    """After the WRITER_BUNDLE frames: the writer, its tip and the bundle's size (0: none sent)."""

    WHAT = "the writer's fetch"
    tip: str
    bundle: int


@_request
@dataclass(repr=False, eq=False)
class WriterFetchedRequest(Request):
    OP = Op.WRITER_FETCHED
    root: str
    name: str
    tip: str


@dataclass(repr=False, eq=False)
class WriterFetchedResult(Message):
    WHAT = "the fetch's record"
    fetched: str


@_request
@dataclass(repr=False, eq=False)
class WriterStopRequest(Request):
    OP = Op.WRITER_STOP
    root: str
    name: str


@dataclass(repr=False, eq=False)
class WriterStopResult(WriterRow):
    """The writer after the stop: whether it ran, the `.env` files removed, its log's last lines."""

    WHAT = "the writer's stop"
    was_running: bool
    env_removed: list[str]
    log_tail: str


def answer(data: bytes, cls: type[M]) -> M | Refusal:
    """A RESULT frame's JSON as `cls`, or as the refusal it is."""
    obj = _json(data, cls.WHAT)
    if isinstance(obj, dict) and "refused" in obj and "refused" not in _names(cls):
        return Refusal.from_wire(obj)
    return cls.from_wire(obj)


def writer_answer(data: bytes, cls: type[M]) -> M | NoWriter | Refusal:
    """The RESULT of `writer-fetch` or `writer-stop`: `cls`, NoWriter or a refusal."""
    obj = _json(data, cls.WHAT)
    if isinstance(obj, dict) and "none" in obj:
        return NoWriter.from_wire(obj)
    return answer(data, cls)
