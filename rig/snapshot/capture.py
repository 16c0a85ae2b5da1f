"""What a role looks like on one host: files with owner, mode and content, plus command outputs.

One shell script runs on the host (plain sh and coreutils, nothing to install) and prints a
small line format; `parse_capture` turns that output into records. The parser is the part
the golden files exercise with recorded host output.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import shlex
from dataclasses import dataclass, field

from lanes.base.errors import NevError
from lanes.base.jsonfile import Fields
from lanes.base.mask import mask
from lanes.base.ssh import Connection

# $1 = number of files, then the files, then the commands. A symlink or a non-file is
# reported, never followed: restoring through a link would replace the link itself.
SCRIPT = r"""
set -u
umask 077
nf=$1; shift
i=0
while [ "$i" -lt "$nf" ]; do
  p=$1; shift; i=$((i+1))
  printf '=file %s\n' "$p"
  if [ -L "$p" ]; then printf 'symlink %s\n' "$(readlink -f -- "$p")"
  elif [ -f "$p" ]; then
    if [ -r "$p" ]; then stat -c 'stat %u %g %U %G %a %s' -- "$p"; base64 -w0 -- "$p"; printf '\n'
    else echo unreadable; fi
  elif [ -e "$p" ]; then echo notafile
  else echo missing; fi
done
n=0
for c in "$@"; do
  printf '=cmd %d\n' "$n"; n=$((n+1))
  t=$(mktemp)
  sh -c "$c" >"$t" 2>&1 </dev/null
  printf 'exit %d\n' "$?"
  base64 -w0 <"$t"; printf '\n'
  rm -f "$t"
done
echo =end
"""


class CaptureError(NevError):
    pass


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileRec:
    """One file as found on a host (etckeeper-style: owner, group and mode kept)."""

    path: str
    missing: bool = False
    uid: int = 0
    gid: int = 0
    user: str = ""
    group: str = ""
    mode: int = 0
    size: int = 0
    sha256: str = ""

    def meta(self) -> str:
        return "absent" if self.missing else f"{self.user}:{self.group} {self.mode:04o}"

    def same_as(self, other: FileRec) -> bool:
        if self.missing or other.missing:
            return self.missing == other.missing
        return (self.sha256, self.user, self.group, self.mode) == (other.sha256, other.user, other.group, other.mode)

    def to_json(self) -> dict[str, object]:
        if self.missing:
            return {"path": self.path, "missing": True}
        return {"path": self.path, "user": self.user, "group": self.group, "uid": self.uid, "gid": self.gid,
                "mode": f"{self.mode:04o}", "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, value: object, f: Fields, where: str) -> FileRec:
        """One file of a manifest (ConfigError naming the field otherwise)."""
        d = f.obj(value, where)
        path = f.get(d, "path", str, where)
        if f.get(d, "missing", bool, where, required=False, default=False):
            return cls(path=path, missing=True)
        mode = f.get(d, "mode", str, where)
        try:
            bits = int(mode, 8)
        except ValueError:
            why = f"is {mode[:20]!r}, not an octal mode such as 0644"
            raise f.fail(f"{where}.mode", why) from None
        return cls(
            path=path,
            uid=f.get(d, "uid", int, where),
            gid=f.get(d, "gid", int, where),
            user=f.get(d, "user", str, where),
            group=f.get(d, "group", str, where),
            mode=bits,
            size=f.get(d, "size", int, where),
            sha256=f.get(d, "sha256", str, where),
        )


@dataclass(frozen=True)
class CmdRec:
    cmd: str
    exit: int
    sha256: str

    def to_json(self) -> dict[str, object]:
        return {"cmd": self.cmd, "exit": self.exit, "sha256": self.sha256}

    @classmethod
    def from_json(cls, value: object, f: Fields, where: str) -> CmdRec:
        d = f.obj(value, where)
        return cls(cmd=f.get(d, "cmd", str, where), exit=f.get(d, "exit", int, where),
                   sha256=f.get(d, "sha256", str, where))


@dataclass
class HostState:
    """A role on one host: records plus the content they point at (blobs by sha256)."""

    host: str
    files: list[FileRec] = field(default_factory=list)
    commands: list[CmdRec] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)

    def file(self, path: str) -> FileRec | None:
        return next((f for f in self.files if f.path == path), None)

    def to_json(self) -> dict[str, object]:
        return {"files": [f.to_json() for f in self.files], "commands": [c.to_json() for c in self.commands]}

    @classmethod
    def from_json(cls, host: str, value: object, f: Fields, where: str) -> HostState:
        d = f.obj(value, where)
        return cls(host=host,
                   files=[FileRec.from_json(x, f, f"{where}.files[{i}]")
                          for i, x in enumerate(f.get(d, "files", list, where))],
                   commands=[CmdRec.from_json(x, f, f"{where}.commands[{i}]")
                             for i, x in enumerate(f.get(d, "commands", list, where))])


def parse_capture(raw: bytes, host: str, files: list[str], commands: list[str]) -> HostState:
    """Turn the capture script's output into records; every oddity is one clear error."""
    r = _Reader(raw, HostState(host=host))
    for path in files:
        r.state.files.append(r.file(path))
    for n, cmd in enumerate(commands):
        r.state.commands.append(r.command(n, cmd))
    if r.line("the end marker") != "=end":
        raise CaptureError(f"capture on {host} did not finish cleanly; run it again")
    return r.state


class _Reader:
    """The capture script's output, line by line, into `state` (content goes to its blobs)."""

    def __init__(self, raw: bytes, state: HostState) -> None:
        self.lines = iter(raw.decode("utf-8", errors="replace").split("\n"))
        self.state = state
        self.host = state.host

    def line(self, what: str) -> str:
        try:
            return next(self.lines)
        except StopIteration:
            raise CaptureError(f"capture on {self.host} ended early while reading {what}; run it again") from None

    def blob(self, what: str, named: str) -> tuple[bytes, str]:
        """The next line's base64 content, kept under its sha256."""
        try:
            data = base64.b64decode(self.line(what), validate=True)
        except binascii.Error:
            raise CaptureError(f"capture on {self.host}: {named} came back damaged; run it again") from None
        sha = sha256(data)
        self.state.blobs[sha] = data
        return data, sha

    def file(self, path: str) -> FileRec:
        host = self.host
        head = self.line(path)
        if head != f"=file {path}":
            raise CaptureError(f"capture on {host}: expected {path}, got {mask(head[:80])!r}; run it again")
        kind = self.line(path)
        if kind == "missing":
            return FileRec(path=path, missing=True)
        if kind.startswith("symlink "):
            raise CaptureError(f"{path} on {host} is a symlink to {kind[8:]}; list the file it points to "
                               "in the rig file instead")
        if kind == "notafile":
            raise CaptureError(f"{path} on {host} is not a regular file; list only files in the rig file")
        if kind == "unreadable":
            raise CaptureError(f"{path} on {host} is not readable by the SSH user; the roles' hosts are "
                               "reached as root (give root@host in the rig file)")
        parts = kind.split(" ")
        if len(parts) != 7 or parts[0] != "stat":
            raise CaptureError(f"capture on {host}: bad stat line for {path}; run it again")
        _, uid, gid, user, group, mode, size = parts
        data, sha = self.blob(path, f"the content of {path}")
        if len(data) != int(size):
            raise CaptureError(f"{path} on {host} changed while it was read ({size} bytes, then {len(data)}); "
                               "run the snapshot again")
        return FileRec(path=path, uid=int(uid), gid=int(gid), user=user, group=group,
                       mode=int(mode, 8), size=len(data), sha256=sha)

    def command(self, n: int, cmd: str) -> CmdRec:
        if self.line(cmd) != f"=cmd {n}":
            raise CaptureError(f"capture on {self.host}: output of {cmd!r} is out of place; run it again")
        ex = self.line(cmd)
        if not ex.startswith("exit "):
            raise CaptureError(f"capture on {self.host}: no exit status for {cmd!r}; run it again")
        _out, sha = self.blob(cmd, f"the output of {cmd!r}")
        return CmdRec(cmd=cmd, exit=int(ex[5:]), sha256=sha)


def capture_argv(files: list[str], commands: list[str]) -> str:
    return shlex.join(["sh", "-c", SCRIPT, "nev-capture", str(len(files)), *files, *commands])


def capture_raw(conn: Connection, files: list[str], commands: list[str]) -> bytes:
    res = conn.run(capture_argv(files, commands), timeout=120)
    if res.exit_status != 0:
        raise CaptureError(f"capture on {conn.target} failed (exit {res.exit_status}): "
                           f"{mask(res.err.strip()[-300:]) or 'no message'}")
    return res.stdout


def capture_host(conn: Connection, host: str, files: list[str], commands: list[str]) -> HostState:
    return parse_capture(capture_raw(conn, files, commands), host, files, commands)
