"""The wire between the development box and the agent: frames of named kinds, requests by named operation.

One SSH channel carries one conversation: frames both ways, each a kind byte, a 4-byte
big-endian length, the data. The bootstrap (`lanes/payload.py`) runs the lane's cached copy of
the agent named by its content hash; when the lane lacks that hash (or the copy does not match
it), it sends NEED_AGENT first and the development box answers with one AGENT frame, the agent
itself, whatever requests it sent before that are kept for the agent. Every other frame the
development box sends is a REQUEST (JSON with an `op`); a payload, writer-start or bundle
request is followed by its members as raw bytes of the announced sizes. Every request and every
JSON answer is a dataclass of `lanes.agent.messages` on both ends (the request's class named
below), read back field by field: a malformed one is a ProtocolError, one line.

| op | asked by | the agent answers |
|---|---|---|
| `hello` (`Hello`) | a gate (`lanes/gate.py`) | HELLO (`HelloAnswer`: mirror tips, last fetch age, free disk, copies when short), or RESULT with a refusal |
| `payload` (`Payload`) | the gate, after HELLO | MESSAGE, STDOUT, STDERR, NEED_BUNDLE, PULL_START/PULL_DATA/PULL_END as they come, RESULT (`GateResult`) last |
| `writer-start` (`WriterStart`) | `nev lane writer start`, after HELLO | MESSAGE, NEED_BUNDLE as they come; RESULT (`GateResult`, its `writer` the record) as soon as the harness is started, detached |
| `bundle` (`Bundle`) | the gate, after NEED_BUNDLE | (the run goes on) |
| `stop` (`StopRun`) | the gate, on an interrupt | RESULT with `stopped` |
| `abort` (`Abort`) | the gate, when the disk guard says no | RESULT with `aborted` |
| `status` | `nev lane list` | RESULT: free disk, copies, gates running |
| `cleanup` | the gate's second call after a dropped connection | RESULT: the `.env` files removed, or busy |
| `survey` | `nev lane sweep` | RESULT: facts about every entry under the root (writer records too) |
| `remove` | `nev lane sweep` | RESULT: per copy and writer record, removed (and archived where) or kept and why |
| `archives` | `nev lane sweep --archives` | RESULT: every entry of the share's archive folders, with its time |
| `drop-archives` | `nev lane sweep --archives` | RESULT: the entries removed, or kept and why |
| `prune-refs` | `nev dagu prune-mirror` | RESULT: per mirror, the job and result refs the forge no longer has, removed |
| `writer-status` | `nev lane writer status` | RESULT: every writer under the root: running or its exit, its unfetched commits |
| `writer-fetch` | `nev lane writer fetch` | WRITER_BUNDLE frames (the writer's commits the request lacks), RESULT last |
| `writer-fetched` | `nev lane writer fetch`, after the fast-forward | RESULT: the tip recorded as fetched |
| `writer-stop` | `nev lane writer stop` | RESULT: the writer stopped, its `.env` removed, its commits kept; the log's last lines |

Stdlib only; the development box reads and writes frames with the same definitions.
"""

from __future__ import annotations

import io
import json
import os
import struct
import threading
from collections.abc import Iterator
from enum import Enum

from lanes.agent.errors import Refused

FRAME = struct.Struct(">cI")
CHUNK = 256 * 1024


class Kind(bytes, Enum):
    """A frame's kind byte."""

    REQUEST = b"J"      # dev -> lane: a JSON request with an `op` (Op)
    AGENT = b"A"        # dev -> lane: the agent (zlib'd JSON of its modules), only when asked
    NEED_AGENT = b"a"   # lane -> dev, from the bootstrap: no cached agent of that hash, send it
    HELLO = b"H"        # lane -> dev: the answer to `hello`
    MESSAGE = b"M"      # one line for the person (waiting for a lock, a stray moved aside, ...)
    STDOUT = b"O"       # the command's stdout, as it comes
    STDERR = b"E"       # the command's stderr, as it comes
    NEED_BUNDLE = b"N"  # the bundle's basis is missing even after a fetch: {"tips": [...]}, send another
    PULL_START = b"Q"   # a pulled folder begins: {"dir": DIR}
    PULL_DATA = b"P"    # a piece of its gzip'd tar
    PULL_END = b"q"     # the pulled folder is complete
    WRITER_BUNDLE = b"B"  # lane -> dev: a piece of a writer's bundle (`writer-fetch`)
    RESULT = b"R"       # the result (JSON), always last


# (str, Enum) rather than StrEnum: the agent runs on the lane's python3, which may predate 3.11.
class Op(str, Enum):  # noqa: UP042
    """A request's operation (its `op` field)."""

    HELLO = "hello"
    PAYLOAD = "payload"
    WRITER_START = "writer-start"
    BUNDLE = "bundle"
    STOP = "stop"
    ABORT = "abort"
    STATUS = "status"
    CLEANUP = "cleanup"
    SURVEY = "survey"
    REMOVE = "remove"
    ARCHIVES = "archives"
    DROP_ARCHIVES = "drop-archives"
    PRUNE_REFS = "prune-refs"
    WRITER_STATUS = "writer-status"
    WRITER_FETCH = "writer-fetch"
    WRITER_FETCHED = "writer-fetched"
    WRITER_STOP = "writer-stop"


class Stop(str, Enum):  # noqa: UP042
    """How a run was stopped (a stop request's `signal`, a result's `stopped`), with its exit status."""

    INT = "INT"
    TERM = "TERM"

    @property
    def status(self) -> int:
        return 130 if self is Stop.INT else 143


class ProtocolError(Refused):
    """A frame of no known kind, or a frame where a request was due."""

    def __init__(self, what: str) -> None:
        super().__init__(f"protocol error: {what}")
        self.what = what


def frame(kind: Kind, data: bytes = b"") -> bytes:
    return FRAME.pack(kind.value, len(data)) + data


def parse(buf: bytearray) -> Iterator[tuple[Kind, bytes]]:
    """The complete frames at the start of `buf`, each removed from it as it is yielded."""
    while len(buf) >= FRAME.size:
        kind, n = FRAME.unpack(buf[:FRAME.size])
        if len(buf) < FRAME.size + n:
            return
        data = bytes(buf[FRAME.size:FRAME.size + n])
        del buf[:FRAME.size + n]
        yield _kind(kind), data


def _kind(kind: bytes) -> Kind:
    try:
        return Kind(kind)
    except ValueError:
        raise ProtocolError(f"a frame of unknown kind {kind!r}") from None


class Prefixed:
    """A readable file that gives `head` first, then what `rest` gives: the frames the bootstrap
    read while it waited for the agent, then stdin."""

    def __init__(self, head: bytes, rest: io.BufferedReader) -> None:
        self.head = head
        self.rest = rest

    def read(self, n: int) -> bytes:
        if not self.head:
            return self.rest.read(n)
        out, self.head = self.head[:n], self.head[n:]
        return out


class Wire:
    """The agent's end: frames from stdin, frames to stdout (writes from several threads)."""

    def __init__(self, rfile: io.BufferedReader | Prefixed, wfile: io.BufferedWriter) -> None:
        self.r = rfile
        self.w = wfile
        self.lock = threading.Lock()
        self.broken = False

    def send(self, kind: Kind, data: bytes = b"") -> None:
        if self.broken:
            return
        with self.lock:
            try:
                for i in range(0, max(len(data), 1), CHUNK * 4):
                    self.w.write(frame(kind, data[i:i + CHUNK * 4]))
                self.w.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.broken = True

    def send_json(self, kind: Kind, obj: object) -> None:
        self.send(kind, json.dumps(obj).encode())

    def say(self, text: str) -> None:
        self.send(Kind.MESSAGE, text.encode())

    def read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            got = self.r.read(n - len(buf))
            if not got:
                raise EOFError
            buf += got
        return bytes(buf)

    def read_frame(self) -> tuple[Kind, bytes]:
        kind, n = FRAME.unpack(self.read_exact(FRAME.size))
        return _kind(kind), self.read_exact(n)

    def read_request(self) -> bytes:
        """The next frame's data, which must be a REQUEST's (`wiretypes.read_request` reads it)."""
        kind, data = self.read_frame()
        if kind is not Kind.REQUEST:
            raise ProtocolError(f"expected a request, got a {kind.name} frame")
        return data

    def copy_to(self, path: str, n: int) -> None:
        """The next `n` raw bytes into a new file at `path` (mode 600)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            left = n
            while left:
                got = self.r.read(min(left, CHUNK))
                if not got:
                    raise EOFError
                f.write(got)
                left -= len(got)


class FrameWriter(io.RawIOBase):
    """A file that sends what is written to it as frames of one kind, CHUNK at a time."""

    def __init__(self, wire: Wire, kind: Kind) -> None:
        self.wire = wire
        self.kind = kind
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[no-untyped-def, override]
        self.buf += b
        if len(self.buf) >= CHUNK:
            self.flush_all()
        return len(b)

    def flush_all(self) -> None:
        if self.buf:
            self.wire.send(self.kind, bytes(self.buf))
            self.buf.clear()
