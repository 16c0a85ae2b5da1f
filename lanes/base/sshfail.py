"""Why an SSH connection failed, decided once for every command: the OpenSSH client's stderr
(`from_openssh`) or paramiko's exception (`from_exception`) turned into one `Cause` and the hop it
happened at (the jump host or the host behind it), and that into one `Unreachable` error whose
line names the cause, the host and the next step. Every command that connects (the gate, `nev
lane list`, `nev lane install`, `nev dagu ...`, `nev rig ...`, the forwards) says it the same way
and exits with the same code (3, docs/exit-codes.md).

| what the client saw                                    | cause        |
|--------------------------------------------------------|--------------|
| `Could not resolve hostname`, socket.gaierror          | resolve      |
| `Connection refused`, ConnectionRefusedError           | refused      |
| `timed out`, a banner never read, socket.timeout       | timeout      |
| `No ... host key is known`, `not found in known_hosts` | not-pinned   |
| `IDENTIFICATION HAS CHANGED`, BadHostKeyException      | changed      |
| the key file missing or unreadable (checked first)     | key-file     |
| `Permission denied`, AuthenticationException           | login        |
| anything else                                          | other        |
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from lanes.base.mask import mask


class Hop(Protocol):
    """A host as `lanes.base.ssh.Target` holds it (this module is below that one)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...


class Cause(Enum):
    """Why a hop failed: the words on the line and the next step."""

    text: str
    step: str

    def __new__(cls, value: str, text: str, step: str) -> Cause:
        obj = object.__new__(cls)
        obj._value_ = value
        obj.text = text
        obj.step = step
        return obj

    RESOLVE = ("resolve", "name does not resolve",
               "check the host name (lanes file, rig file, NEV_LANE_JUMP) and this machine's DNS")
    REFUSED = ("refused", "connection refused",
               "nothing listens there: check the port and that sshd runs on the host")
    TIMEOUT = ("timeout", "timed out",
               "the host does not answer: check that it is up and reachable from here")
    NOT_PINNED = ("not-pinned", "host key not pinned",
                  "pin it with `nev rig trust HOST` (NEV_KNOWN_HOSTS names the file)")
    CHANGED = ("changed", "host key changed",
               "re-pin it (`nev rig trust HOST`) only if the host was really rebuilt")
    JUMP_CONNECT = ("jump-connect", "the jump host cannot connect to it",
                    "check its address and port (the lanes file) and that it is up; the jump "
                    "host resolves its name")
    KEY_FILE = ("key-file", "key file missing or unreadable",
                "set NEV_SSH_KEY (or the rig file's ssh_key) to a readable private key")
    LOGIN = ("login", "login refused",
             "the host did not accept the key: add its public half to the user's authorized_keys")
    OTHER = ("other", "SSH failed",
             "run again with `nev -v` to see the ssh command and try it by hand")

    @property
    def lasting(self) -> bool:
        """A retry gets the same answer until someone acts (a key, a pin, a name)."""
        return self in (Cause.NOT_PINNED, Cause.CHANGED, Cause.KEY_FILE, Cause.LOGIN, Cause.RESOLVE)


@dataclass(frozen=True)
class Failure:
    cause: Cause
    host: str                  # the hop that failed, `user@host[:port]`
    at_jump: bool              # that hop is the jump host (the lane behind it was never reached)
    detail: str = ""           # the client's own words (masked), or the file

    def line(self, route: str = "") -> str:
        hop = f"the jump host {self.host}: " if self.at_jump else f"{self.host}: "
        via = f"cannot reach {route}: " if route and route != self.host else ""
        if self.cause is Cause.KEY_FILE:        # this machine's, whichever hop
            hop, via = "", via or f"cannot reach {self.host}: "
        detail = f" ({self.detail})" if self.detail else ""
        return f"{via}{hop}{self.cause.text}{detail}; {self.cause.step}"


class SshError(NevError):
    """An SSH operation failed (a command's own failure over a working connection included)."""


class Unreachable(SshError):
    """A host (or the jump host in front of it) could not be reached: nothing ran there. Exit 3,
    the one code of "cannot reach the rig" (docs/exit-codes.md). `failure` says why."""

    exit_code = Exit.UNAVAILABLE
    #: the kept connection's master was there but lost its connection (`lanes.base.openssh`):
    #: nothing reached the lane, and a new connection may well
    master_lost = False

    def __init__(self, why: Failure | str, route: str = "") -> None:
        if isinstance(why, Failure):
            super().__init__(why.line(route))
            self.failure: Failure | None = why
        else:
            super().__init__(why)
            self.failure = getattr(why, "failure", None)

    @property
    def cause(self) -> Cause:
        return self.failure.cause if self.failure is not None else Cause.OTHER


class HostKeyError(Unreachable):
    """The host key is not pinned, or does not match the pin: refused, never added."""


def error(failure: Failure, route: str = "") -> Unreachable:
    """The error to raise for `failure`: HostKeyError for a key not pinned or changed."""
    kind = HostKeyError if failure.cause in (Cause.NOT_PINNED, Cause.CHANGED) else Unreachable
    return kind(failure, route)


def local_problem(key_file: Path | None, known_hosts: Path) -> tuple[Cause, str] | None:
    """What is wrong on this machine before any connection: the key file or the known_hosts file
    missing or unreadable."""
    if key_file is not None:
        if not key_file.is_file():
            return Cause.KEY_FILE, f"{key_file} does not exist"
        if not os.access(key_file, os.R_OK):
            return Cause.KEY_FILE, f"{key_file} is not readable"
    if not known_hosts.is_file():
        return Cause.NOT_PINNED, f"the known_hosts file {known_hosts} does not exist"
    return None


# The client's lines, most telling first: the first pattern any line matches decides.
_PATTERNS: tuple[tuple[Cause, re.Pattern[str]], ...] = (
    (Cause.CHANGED, re.compile(r"IDENTIFICATION HAS CHANGED|Host key for .* has changed")),
    (Cause.NOT_PINNED, re.compile(r"host key is known for|Host key verification failed|"
                                  r"not found in known_hosts")),
    (Cause.KEY_FILE, re.compile(r"Identity file .* not accessible|Load key .*: (No such file|"
                                r"Permission denied|invalid format)")),
    (Cause.RESOLVE, re.compile(r"Could not resolve hostname|Name or service not known|"
                               r"Temporary failure in name resolution|unknown host")),
    (Cause.REFUSED, re.compile(r"Connection refused|connect failed")),
    (Cause.TIMEOUT, re.compile(r"timed out|Connection timed out|No route to host|"
                               r"Network is unreachable")),
    (Cause.LOGIN, re.compile(r"Permission denied|Too many authentication failures")),
)
# Said by the lane's client when its hop through the jump host died: never the cause itself.
_ECHO = re.compile(r"kex_exchange_identification|Connection closed by UNKNOWN|"
                   r"stdio forwarding failed|Connection closed by remote host")


def _mentions(line: str, t: Hop, bare: bool = True) -> bool:
    """Whether the client's line names host `t`: `[host]:port`, `host port N`, or (`bare`) the
    host name alone."""
    host, port = t.host, t.port
    if any(n in line for n in (f"[{host}]:{port}", f"{host} port {port}", f"{host}:{port}")):
        return True
    return bare and re.search(rf"(?<![\w.-]){re.escape(host)}(?![\w-]|\.\w)", line) is not None


def pin_detail(cause: Cause, known_hosts: Path | None, said: str) -> str:
    """The detail of a host key failure: the file the pin is (not) in."""
    if known_hosts is None:
        return said
    return (f"it is not pinned in {known_hosts}" if cause is Cause.NOT_PINNED
            else f"it does not match the one pinned in {known_hosts}; refusing to connect")


def from_openssh(stderr: str, target: Hop, jump: Hop | None,
                 known_hosts: Path | None = None) -> Failure:
    """The OpenSSH client's complaint (its stderr, the jump hop's included) as one Failure."""
    lines = [ln.strip() for ln in stderr.replace("\r", "\n").splitlines() if ln.strip()]
    for cause, pat in _PATTERNS:
        hits = [ln for ln in lines if pat.search(ln)]
        # the line that names a host, when one does (`@@@ ... HAS CHANGED` names none)
        named = [ln for ln in hits if _mentions(ln, target) or (jump and _mentions(ln, jump))]
        for ln in (named or hits)[:1]:
            at_jump = jump is not None and _at_jump(ln, target, jump)
            detail = mask(ln)[:200]
            if cause in (Cause.NOT_PINNED, Cause.CHANGED):
                detail = pin_detail(cause, known_hosts, detail)
            return Failure(cause, str(jump if at_jump else target), at_jump, detail)
    said = [ln for ln in lines if not _ECHO.search(ln)]
    at_jump = jump is not None and bool(said) and _at_jump(said[-1], target, jump)
    detail = mask((said or lines)[-1])[:200] if lines else "ssh exited 255 without a message"
    return Failure(Cause.OTHER, str(jump if at_jump else target), at_jump, detail)


def _at_jump(line: str, target: Hop, jump: Hop) -> bool:
    """Whether the jump host is the hop the line speaks of. `channel N: open failed: connect
    failed` is the jump host saying it could not reach the lane: the lane's hop."""
    if "open failed" in line or "stdio forwarding" in line:
        return False
    bare = target.host != jump.host
    return _mentions(line, jump, bare) and not _mentions(line, target, bare)


def from_exception(e: BaseException, target: Hop, at_jump: bool = False,
                   known_hosts: Path | None = None) -> Failure:
    """paramiko's (or the socket's) exception as one Failure of `target`'s hop."""
    import socket

    name = type(e).__name__
    text = mask(str(e))[:200]
    cause = Cause.OTHER
    if isinstance(e, socket.gaierror):
        cause = Cause.RESOLVE
    elif isinstance(e, ConnectionRefusedError):
        cause = Cause.REFUSED
    elif isinstance(e, TimeoutError | socket.timeout):
        cause = Cause.TIMEOUT
    elif name == "BadHostKeyException":
        cause = Cause.CHANGED
    elif name in ("AuthenticationException", "BadAuthenticationType"):
        cause = Cause.LOGIN
    elif name == "ChannelException":   # the jump host's answer: refused, no such name, down...
        cause = Cause.JUMP_CONNECT
    elif name == "NoValidConnectionsError":     # every address of the host: the first one's why
        errors = list(getattr(e, "errors", {}).values())
        return from_exception(errors[0], target, at_jump) if errors else Failure(
            Cause.OTHER, str(target), at_jump, text)
    elif isinstance(e, FileNotFoundError | PermissionError):
        cause = Cause.KEY_FILE
    else:
        for c, pat in _PATTERNS:
            if pat.search(str(e)):
                cause = c
                break
        if cause is Cause.OTHER and "protocol banner" in str(e):
            cause = Cause.TIMEOUT
    if cause in (Cause.NOT_PINNED, Cause.CHANGED):
        text = pin_detail(cause, known_hosts, text)
    return Failure(cause, str(target), at_jump, text or name)


_NET = {Cause.RESOLVE: re.compile(r"Could not resolve host|Name or service not known"),
        Cause.REFUSED: re.compile(r"Connection refused|Couldn't connect to server|"
                                  r"Failed to connect"),
        Cause.TIMEOUT: re.compile(r"timed out|Timeout was reached")}


def network_cause(said: str) -> Cause | None:
    """Whether a client over a forward (git over HTTP to the forge: curl's words) could not
    connect at all, and why: resolve, refused or timeout; None when it connected."""
    for cause, pat in _NET.items():
        if pat.search(said):
            return cause
    return None
