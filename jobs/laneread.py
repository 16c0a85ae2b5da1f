"""Reading files of a job's state on its lane from the development box: one small
standard-library program (`REMOTE`, `read_files`) run with the lane's python3 over the lanes file's
SSH connection (`Lane.connect`), kept open on one session (`LaneReader`): per request a file from
a byte offset, at most a cap, with its size and inode, in one answer (`parse_reply`).
Its users: the job view (`jobs/lanestate.py`) and the follower (`jobs/follow.py`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lanes.base import jsonfile
from lanes.base.errors import ConfigError, NevError
from lanes.base.mask import mask

if TYPE_CHECKING:
    from lanes.base.ssh import Connection

READ_TIMEOUT_S = 20.0
CHUNK = 1 << 16


def read_files(reqs: list, now: float) -> tuple[dict, list]:
    """Run on the lane (standard library only): per request [path, offset, cap] the file's bytes
    from `offset` (a negative offset: the last -offset bytes; an offset past the end, the file
    being shorter than what was seen: from 0), at most `cap`, and its inode, size and start."""
    import os

    files: list[dict] = []
    chunks: list[bytes] = []
    for path, offset, cap in reqs:
        try:
            with open(os.path.expanduser(path), "rb") as f:
                st = os.fstat(f.fileno())
                size = st.st_size
                start = max(0, size + offset) if offset < 0 else (offset if offset <= size else 0)
                f.seek(start)
                data = f.read(max(0, min(cap, size - start)))
        except (FileNotFoundError, NotADirectoryError):
            files.append({"missing": True})
            continue
        except OSError as e:
            files.append({"error": e.strerror or type(e).__name__})
            continue
        files.append(
            {"ino": st.st_ino, "size": size, "start": start, "len": len(data), "mtime": st.st_mtime}
        )
        chunks.append(data)
    return {"now": now, "files": files}, chunks


# One process for as long as the session is open: a request line in, an answer out; it ends with
# its input (the session closed, the connection dropped).
REMOTE = """
import json, sys, time
{read_files}
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    head, chunks = read_files(json.loads(line), time.time())
    out.write(json.dumps(head).encode() + b"\\n")
    for c in chunks:
        out.write(c)
    out.flush()
"""


def remote_command() -> str:
    return "python3 -I -S -c " + shlex.quote(
        REMOTE.format(read_files=inspect.getsource(read_files))
    )


@dataclass(frozen=True)
class Got:
    """One file as the lane's reader answered: missing, an error, or bytes from `start`."""

    missing: bool = False
    error: str | None = None
    ino: int = 0
    size: int = 0
    start: int = 0
    length: int = 0
    mtime: float = 0.0  # on the lane's clock
    data: bytes = b""


@dataclass(frozen=True)
class Reply:
    now: float  # the lane's clock (stage ages are measured on it)
    files: list[Got]


AGAIN = "is this lane's nev the same version as here?"


def parse_head(line: bytes, n: int, label: str) -> tuple[float, list[Got]]:
    """The answer's first line (pure): the lane's clock and, per request, what came (its bytes
    follow the line: `length` each); NevError naming `label` when it is not that for `n`
    requests."""
    try:
        f = jsonfile.Fields(f"{label}: the job state reader's answer")
        head = f.obj(
            jsonfile.parse(line.decode("utf-8", "replace"), label, "job state reader's answer"),
            "(answer)",
        )
        now = float(f.get(head, "now", (int, float), ""))
        items = f.get(head, "files", list, "")
        if len(items) != n:
            raise f.fail("files", f"holds {len(items)} answers for {n} requests")
        files = []
        for i, it in enumerate(items):
            d, w = f.obj(it, f"files[{i}]"), f"files[{i}]"
            if d.get("missing"):
                files.append(Got(missing=True))
            elif "error" in d:
                files.append(Got(error=str(f.get(d, "error", str, w))))
            else:
                ln = f.get(d, "len", int, w)
                if ln < 0:
                    raise f.fail(f"{w}.len", f"is {ln}, not a length")
                files.append(
                    Got(
                        ino=f.get(d, "ino", int, w),
                        size=f.get(d, "size", int, w),
                        start=f.get(d, "start", int, w),
                        mtime=float(
                            f.get(d, "mtime", (int, float), w, required=False, default=0.0)
                        ),
                        length=ln,
                    )
                )
    except ConfigError as e:
        raise NevError(f"{e.message}; {AGAIN}") from None
    return now, files


def fill(files: list[Got], body: bytes, label: str) -> list[Got]:
    """Each file's bytes cut from the body that followed the answer's line (pure)."""
    out, pos = [], 0
    for g in files:
        out.append(dataclasses.replace(g, data=body[pos : pos + g.length]))
        pos += g.length
    if pos != len(body):
        raise NevError(
            f"{label}: the job state reader's answer names {pos} bytes, {len(body)} came; {AGAIN}"
        )
    return out


def parse_reply(raw: bytes, n: int, label: str) -> Reply:
    """A whole answer (pure): its line, then the files' bytes back to back."""
    line, sep, body = raw.partition(b"\n")
    if not sep:
        raise NevError(f"{label}: the job state reader's answer has no first line; {AGAIN}")
    now, files = parse_head(line, n, label)
    return Reply(now, fill(files, body, label))


class LaneReader:
    """The lane's reader (`REMOTE`) on one SSH session of an open connection, kept open between
    reads: no new session, no new process per read."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.ch = conn.open_session(remote_command())
        self.ch.settimeout(READ_TIMEOUT_S)
        self.buf = b""

    def _fail(self, what: str) -> NevError:
        from lanes.base.ssh import SshError

        err = b""
        while self.ch.recv_stderr_ready():
            err += self.ch.recv_stderr(65536)
        last = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()][-1:]
        return SshError(
            f"the job state reader on {self.conn.target} {what}"
            + (f": {mask(last[0])}" if last else "")
        )

    def _until(self, n: int | None) -> bytes:
        """The next line (n None) or the next n bytes."""

        while (b"\n" not in self.buf) if n is None else (len(self.buf) < n):
            try:
                got = self.ch.recv(CHUNK)
            except TimeoutError:
                raise self._fail(f"gave no answer within {READ_TIMEOUT_S:.0f} s") from None
            if not got:
                time.sleep(0.1)  # its error, if any, comes with its exit
                raise self._fail("ended")
            self.buf += got
        cut = self.buf.index(b"\n") + 1 if n is None else n
        out, self.buf = self.buf[:cut], self.buf[cut:]
        return out

    def read(self, reqs: list[tuple[str, int, int]]) -> Reply:
        self.ch.sendall(json.dumps(reqs).encode() + b"\n")
        label = str(self.conn.target)
        now, files = parse_head(self._until(None)[:-1], len(reqs), label)
        return Reply(now, fill(files, self._until(sum(g.length for g in files)), label))

    def close(self) -> None:
        self.ch.close()
