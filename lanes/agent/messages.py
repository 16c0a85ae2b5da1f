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

Any RESULT but a gate's may be a `Refusal` instead. A field with a default may be left out; the
annotations are read from their text (`from __future__ import annotations`), so the lane's
python3 needs no newer typing than the rest of the agent. Stdlib only.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar, NamedTuple, TypeVar

from lanes.agent.wire import Kind, Op, ProtocolError, Stop, Wire, frame

M = TypeVar("M", bound="Message")
_CHECKS: dict[type, list[tuple[str, _Type, bool, object]]] = {}


class Message:
    """A dataclass on the wire. `WHAT` names it in an error ("the 'hello' request")."""

    WHAT: ClassVar[str] = "message"

    # One repr and one == for all (`@dataclass(repr=False, eq=False)`, not frozen): the methods a
    # dataclass writes for each class cost the agent's every start more than the rest of it.
    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._values())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and type(other) is type(self) \
            and self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]

    def _values(self) -> list[tuple[str, object]]:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return [(f.name, getattr(self, f.name)) for f in fields]

    def to_wire(self) -> dict[str, object]:
        return {k: _plain(v) for k, v in self._values()}

    @classmethod
    def from_wire(cls: type[M], obj: object) -> M:
        """`obj` (a decoded JSON object) as this message; ProtocolError naming what is wrong."""
        if not isinstance(obj, dict):
            raise ProtocolError(f"{cls.WHAT} is a JSON object, not {_kind_of(obj)}")
        checks = _checks(cls)
        known = {name for name, _, _, _ in checks}
        if issubclass(cls, Request):
            if obj.get("op") != cls.OP.value:
                raise ProtocolError(f"{cls.WHAT} has the op {obj.get('op')!r}")
            known.add("op")
        extra = sorted(str(k) for k in obj if k not in known)
        if extra:
            raise ProtocolError(f"{cls.WHAT} has an unknown field {extra[0]!r}")
        args = {}
        for name, typ, required, _ in checks:
            if name not in obj:
                if required:
                    raise ProtocolError(f"{cls.WHAT} has no {name!r}")
                continue
            try:
                args[name] = _take(typ, obj[name])
            except _Bad as e:
                raise ProtocolError(f"{cls.WHAT}'s {name!r}{e.where}{e.tail}") from None
        return cls(**args)

    @classmethod
    def decode(cls: type[M], data: bytes) -> M:
        """A frame's JSON as this message."""
        return cls.from_wire(_json(data, cls.WHAT))


class Request(Message):
    """A REQUEST frame's JSON: its `op` first, then its fields."""

    OP: ClassVar[Op]

    def to_wire(self) -> dict[str, object]:
        return {"op": self.OP.value, **super().to_wire()}

    def frame(self) -> bytes:
        return frame(Kind.REQUEST, json.dumps(self.to_wire()).encode())


def _request(cls: type[Request]) -> type[Request]:
    cls.WHAT = f"the {cls.OP.value!r} request"
    REQUESTS[cls.OP] = cls
    return cls


REQUESTS: dict[Op, type[Request]] = {}


def request_of(obj: object) -> Request:
    """A request frame's JSON as the request of its `op`; ProtocolError for an unknown one."""
    op = obj.get("op") if isinstance(obj, dict) else None
    try:
        cls = REQUESTS[Op(op)]
    except (ValueError, KeyError):
        raise ProtocolError(f"unknown request {op!r}") from None
    return cls.from_wire(obj)


def read_request(wire: Wire) -> Request:
    """The next frame, a REQUEST, as the request of its `op`."""
    obj = _json(wire.read_request(), "a request")
    if not isinstance(obj, dict):
        raise ProtocolError("a request is a JSON object")
    return request_of(obj)


def _json(data: bytes, what: str) -> object:
    """A frame's data as JSON (every frame read on either end is read here)."""
    try:
        return json.loads(data)
    except ValueError:
        raise ProtocolError(f"{what} is not JSON") from None
    except RecursionError:
        raise ProtocolError(f"{what} is nested too deeply") from None


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
    # Where the gate's jail is built (`lanes.base.sandbox.gate_jail_args`): the lane root, the home
    # and the share, resolved on the lane; bubblewrap's path there (None: not installed).
    root: str = ""
    home: str = ""
    shared: str | None = None
    bwrap: str | None = None


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


# -- the checks: an annotation's text, parsed once per class ------------------------------------

class _Bad(Exception):
    """A value not of its field's type: `tail` ends the one line (" is an int, not a str")."""

    def __init__(self, tail: str, where: str = "") -> None:
        super().__init__(tail)
        self.tail, self.where = tail, where


def _names(cls: type) -> set[str]:
    return {name for name, _, _, _ in _checks(cls)}


def _checks(cls: type) -> list[tuple[str, _Type, bool, object]]:
    """Per field: its name, its parsed type, whether the wire must carry it, its default."""
    got = _CHECKS.get(cls)
    if got is None:
        ns = vars(sys.modules[cls.__module__])
        missing = dataclasses.MISSING
        got = [(f.name, _Parser(str(f.type), ns).parse(),
                f.default is missing and f.default_factory is missing, f.default)
               for f in dataclasses.fields(cls)]
        _CHECKS[cls] = got
    return got


class _Type(NamedTuple):
    """A parsed annotation: `kind` is "name" (of `cls`), "none", "union", "list", "dict" (of its
    values), "tuple" (of `of`, or of `of[0]` repeated when `of[1]` is "more", the `...`)."""

    kind: str
    of: tuple[_Type, ...] = ()
    cls: type | None = None


class _Parser:
    """`str`, `int | None`, `list[X]`, `tuple[X, ...]`, `tuple[X, Y]`, `dict[str, X]`, a class."""

    def __init__(self, text: str, ns: dict[str, object]) -> None:
        for sign in "[],|":
            text = text.replace(sign, f" {sign} ")
        self.toks = text.split()
        self.ns = ns
        self.i = 0

    def parse(self) -> _Type:
        t = self.union()
        if self.i != len(self.toks):
            raise TypeError(f"cannot read the annotation {' '.join(self.toks)!r}")
        return t

    def eat(self, tok: str) -> bool:
        if self.i < len(self.toks) and self.toks[self.i] == tok:
            self.i += 1
            return True
        return False

    def union(self) -> _Type:
        alts = [self.one()]
        while self.eat("|"):
            alts.append(self.one())
        return alts[0] if len(alts) == 1 else _Type("union", tuple(alts))

    def one(self) -> _Type:
        name = self.toks[self.i]
        self.i += 1
        if name == "None":
            return _Type("none")
        if not self.eat("["):
            cls = {"str": str, "int": int, "float": float, "bool": bool}.get(name) or self.ns[name]
            assert isinstance(cls, type), name
            return _Type("name", cls=cls)
        args = [self.union()]
        while self.eat(","):
            args.append(_Type("more") if self.eat("...") else self.union())
        if not self.eat("]") or name not in ("list", "dict", "tuple"):
            raise TypeError(f"cannot read the annotation {' '.join(self.toks)!r}")
        return _Type(name, tuple(args[-1:] if name != "tuple" else args))


def _kind_of(v: object) -> str:
    if v is None:
        return "null"
    return {bool: "a bool", int: "an int", float: "a float", str: "a str", list: "a list",
            dict: "an object"}.get(type(v), type(v).__name__)


def _want(t: _Type) -> str:
    if t.kind == "name":
        if t.cls is not None and issubclass(t.cls, Enum):
            return "one of " + ", ".join(repr(m.value) for m in t.cls)
        if t.cls is not None and issubclass(t.cls, Message):
            return t.cls.WHAT
        names = {str: "a str", int: "an int", float: "a number", bool: "a bool"}
        return names.get(t.cls or object, str(t.cls))
    if t.kind == "none":
        return "null"
    if t.kind == "union":
        return " or ".join(_want(a) for a in t.of)
    if t.kind == "list":
        return f"a list of {_want(t.of[0])}"
    if t.kind == "dict":
        return f"an object of {_want(t.of[0])}"
    return "a list"


def _take(t: _Type, v: object) -> object:
    """`v` as type `t` (a float may come as an int, a tuple as a list); _Bad when it is not."""
    if t.kind == "none":
        if v is None:
            return None
    elif t.kind == "union":
        inner = None
        for a in t.of:
            try:
                return _take(a, v)
            except _Bad as e:
                inner = e if e.tail.startswith(":") else inner   # a message's own complaint
        if inner is not None:
            raise inner
    elif t.kind == "list" and isinstance(v, list):
        return [_take_at(t.of[0], x, i) for i, x in enumerate(v)]
    elif t.kind == "tuple" and isinstance(v, (list, tuple)):
        if len(t.of) == 2 and t.of[1].kind == "more":
            return tuple(_take_at(t.of[0], x, i) for i, x in enumerate(v))
        if len(v) == len(t.of):
            return tuple(_take_at(t.of[i], x, i) for i, x in enumerate(v))
    elif t.kind == "dict" and isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {k: _take_at(t.of[0], x, k) for k, x in v.items()}
    elif t.kind == "name" and t.cls is not None:
        return _take_class(t.cls, v)
    raise _Bad(f" is {_kind_of(v)}, not {_want(t)}")


def _take_class(cls: type, v: object) -> object:
    if cls is float and type(v) in (int, float):
        return float(v)  # type: ignore[arg-type]
    if cls in (str, int, bool) and type(v) is cls:
        return v
    if issubclass(cls, Enum):
        try:
            return cls(v)
        except ValueError:
            pass
    if issubclass(cls, Message) and isinstance(v, dict):
        try:
            return cls.from_wire(v)
        except ProtocolError as e:
            raise _Bad(": " + e.what) from None
    raise _Bad(f" is {_kind_of(v)}, not {_want(_Type('name', cls=cls))}")


def _take_at(t: _Type, v: object, at: object) -> object:
    try:
        return _take(t, v)
    except _Bad as e:
        raise _Bad(e.tail, f"[{at!r}]{e.where}") from None


def _plain(v: object) -> object:
    if isinstance(v, Message):
        return v.to_wire()
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v
