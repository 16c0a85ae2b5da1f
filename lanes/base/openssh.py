"""The OpenSSH client, the second half of the SSH choke point (`lanes.base.ssh` holds paramiko's
`Connection`): `OpenSsh`, one `ssh` process per command (a gate's channel: it starts without
paramiko), and the client holding one local forward (supervised by rig/forward).

The same pins as `Connection`: the host key only from a known_hosts file, `StrictHostKeyChecking=yes`,
never added; no config file, agent or password; commands logged masked.
"""

from __future__ import annotations

import atexit
import os
import select
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lanes.base import sshfail
from lanes.base.mask import mask, mask_argv
from lanes.base.ssh import (
    CHUNK,
    CONNECT_TIMEOUT,
    SshError,
    Target,
    control,
    default_key_file,
    default_known_hosts,
    log,
)
from lanes.base.sshargv import client_options as client_options  # the argv, one place
from lanes.base.sshargv import jump_says, route_argv

# -- the OpenSSH client: one process per command (a gate's channel) -------------------------

class OpenSsh:
    """A pinned host reached with the OpenSSH client, through its jump host when it has one (the
    same pins and key as `Connection`): every `open_session` is one `ssh` process whose pipes are
    the channel. Nothing connects until a session opens; a host that does not answer shows as
    that session's `ssh` exiting 255 before its command said a word (`ProcessChannel.unreachable`)."""

    def __init__(self, target: Target, known_hosts: Path | None = None, key_file: Path | None = None,
                 timeout: float = CONNECT_TIMEOUT, jump: Target | None = None) -> None:
        self.target = target
        self.jump = jump
        self.known_hosts = known_hosts or default_known_hosts()
        self.key_file = key_file if key_file is not None else default_key_file()
        self.timeout = timeout
        self._open: list[ProcessChannel] = []
        self.kept: tuple[str, int] | None = None    # the kept connection `argv` last named

    def argv(self, command: str) -> list[str]:
        """The client's argv for `command`; HostKeyError when the known_hosts file is missing."""
        if not self.known_hosts.exists():
            self._refuse_locally()
        self.kept = control(self.target, self.jump, self.known_hosts, self.key_file)
        return route_argv(self.target, self.jump, self.known_hosts, self.key_file, self.timeout, command,
                          self.kept)

    @property
    def route(self) -> str:
        return f"{self.target}" + (f" via {self.jump}" if self.jump else "")

    def _refuse_locally(self) -> None:
        """Unreachable when the key file or the known_hosts file is missing or unreadable: no
        client would get further."""
        problem = sshfail.local_problem(self.key_file, self.known_hosts)
        if problem is not None:
            raise sshfail.error(sshfail.Failure(problem[0], str(self.jump or self.target),
                                                self.jump is not None, problem[1]), self.route)

    def connect(self) -> OpenSsh:
        return self

    def open_session(self, command: str | list[str]) -> ProcessChannel:
        """The command's channel: the one started ahead with the same argv (`start_ahead`), else
        a new `ssh` process."""
        cmd = command if isinstance(command, str) else shlex.join(command)
        if self.key_file is not None:
            self._refuse_locally()      # the key file (argv checks the known_hosts file)
        argv = self.argv(cmd)
        ch = _AHEAD.pop(tuple(argv), None)
        if ch is None:
            log.debug("ssh %s: %s", self.route, mask_argv(argv))
            ch = ProcessChannel(argv, self)
        ch.via = self
        self._open = [c for c in self._open if not c.closed] + [ch]
        return ch

    def start_ahead(self, command: str, started: Any = None) -> None:
        """Start the client of `command` now, for the first `open_session` of the same command on
        the same route (in this process) to take; stopped at exit when none does. `started` is
        that client already started (a Popen of `argv(command)`: `lanes.quick`)."""
        argv = self.argv(command)
        if not _AHEAD:
            atexit.register(_stop_ahead)
        log.debug("ssh %s (ahead%s): %s", self.route, ", from the record" if started else "", mask(command))
        _AHEAD[tuple(argv)] = ProcessChannel(argv, self, started)

    def failure(self, stderr: str) -> SshError:
        """Why the client could not reach the host, from its stderr (the jump hop's included),
        classified (`lanes.base.sshfail`): HostKeyError for a key not pinned or not matching,
        else Unreachable, naming the cause and the hop."""
        failure = sshfail.from_openssh(stderr, self.target, self.jump, self.known_hosts)
        if failure.cause is sshfail.Cause.OTHER and self.jump is not None and self.kept is not None:
            # a client that would keep its connection sends its jump hop's stderr to /dev/null
            # (OpenSSH, for ControlPersist): the jump host is asked once more and says why
            said = jump_says(self.jump, self.target, self.known_hosts, self.key_file, self.timeout)
            better = sshfail.from_openssh(said, self.target, self.jump, self.known_hosts)
            if better.cause is not sshfail.Cause.OTHER:
                failure = better
        err = sshfail.error(failure, self.route)
        if self.kept is not None and isinstance(err, sshfail.Unreachable) and any(
                w in stderr for w in MASTER_LOST):
            err.master_lost = True
        return err

    def drop_kept(self) -> None:
        """The kept connection given up (its master lost its link: a lane that restarted within
        NEV_SSH_PERSIST): its master asked to exit and its socket removed, so the next session
        connects anew and keeps that connection instead."""
        if self.kept is None:
            return
        path = self.kept[0]
        log.debug("ssh %s: the kept connection was lost; connecting anew", self.route)
        try:
            subprocess.run(["ssh", "-F", "none", "-o", f"ControlPath {path}", "-O", "exit", "lane"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        for ch in self._open:
            ch.close()
        self._open = []

    def __enter__(self) -> OpenSsh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_AHEAD: dict[tuple[str, ...], ProcessChannel] = {}

#: a mux client's words when the master it reached could not carry the session
MASTER_LOST = ("mux_client_", "from master failed", "master hello exchange failed")


def _stop_ahead() -> None:
    """The channels started ahead that no gate took: stopped (the agent at their end had nothing)."""
    while _AHEAD:
        _, ch = _AHEAD.popitem()
        ch.close(wait=0.0)


class ProcessChannel:
    """An `ssh` process's pipes, read and written like the paramiko channel a `Connection` opens
    (sendall, recv_ready/recv, recv_stderr_ready/recv_stderr, exit_status_ready, closed, close);
    `fds` is what to select on. The process has a process group of its own: a terminal's Ctrl-C
    reaches nev, which asks the lane to stop, not the client, which would drop the link."""

    CLOSE_WAIT = 2.0

    def __init__(self, argv: list[str], via: OpenSsh, started: Any = None) -> None:
        """A new `ssh` process for `argv`, or `started` (a Popen of it with the same pipes)."""
        self.via = via
        self.p = started if isinstance(started, subprocess.Popen) else subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, process_group=0)
        assert self.p.stdin is not None and self.p.stdout is not None and self.p.stderr is not None
        self._in: int | None = self.p.stdin.fileno()
        self._fd = {"out": self.p.stdout.fileno(), "err": self.p.stderr.fileno()}
        self._buf = {"out": bytearray(), "err": bytearray()}
        self._eof = {"out": False, "err": False}
        self._err_seen = bytearray()    # the client's own stderr, for `unreachable`
        self.got_output = False
        self._closed = False
        for fd in self._fd.values():
            os.set_blocking(fd, False)

    @property
    def fds(self) -> list[int]:
        if self._closed:
            return []
        return [fd for k, fd in self._fd.items() if not self._eof[k] and not (k == "err" and self.quiet)]

    def fileno(self) -> int:
        return self._fd["out"]

    def _fill(self, which: str) -> None:
        if self._eof[which] or self._closed:
            return
        try:
            data = os.read(self._fd[which], CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._eof[which] = True
            return
        self._buf[which] += data
        if which == "out":
            self.got_output = True
        elif len(self._err_seen) < 65536:
            self._err_seen += data

    def _take(self, which: str, n: int) -> bytes:
        self._fill(which)
        out = bytes(self._buf[which][:n])
        del self._buf[which][:n]
        return out

    def sendall(self, data: bytes) -> None:
        """`data` to the command's stdin. Once the client has gone (it never connected, or the
        link dropped) what is sent is dropped: the reading side sees the end and says why."""
        view = memoryview(data)
        while view and self._in is not None:
            try:
                n = os.write(self._in, view)
            except BlockingIOError:
                select.select([], [self._in], [], 1.0)
                continue
            except BrokenPipeError:
                self.shutdown_write()
                return
            view = view[n:]

    def shutdown_write(self) -> None:
        if self._in is not None and self.p.stdin is not None:
            self._in = None
            try:
                self.p.stdin.close()
            except OSError:     # a broken pipe: the client is gone
                pass

    def recv_ready(self) -> bool:
        self._fill("out")
        return bool(self._buf["out"])

    def recv(self, n: int) -> bytes:
        return self._take("out", n)

    def recv_stderr_ready(self) -> bool:
        self._fill("err")
        return bool(self._buf["err"])

    def recv_stderr(self, n: int) -> bytes:
        return self._take("err", n)

    def exit_status_ready(self) -> bool:
        return self.p.poll() is not None

    def recv_exit_status(self) -> int:
        return self.p.wait()

    @property
    def closed(self) -> bool:
        if self._closed:
            return True
        if self._eof["out"] and self._eof["err"] and self.p.poll() is not None:
            return True
        if self._eof["out"] and self.p.poll() is None:
            try:                            # output ended: the client ends with it
                self.p.wait(self.CLOSE_WAIT)
            except subprocess.TimeoutExpired:
                return False
        return self._eof["out"] and self.p.poll() is not None

    def unreachable(self) -> SshError | None:
        """Why the client never reached the command (exit 255 before any output), else None."""
        if self.got_output or self.p.poll() != 255:
            return None
        deadline = time.monotonic() + 0.5     # the jump hop's client may hold stderr a moment longer
        while not self._eof["err"] and not self._closed and time.monotonic() < deadline:
            select.select([self._fd["err"]], [], [], 0.1)
            self._fill("err")
        return self.via.failure(self._err_seen.decode(errors="replace"))

    @property
    def quiet(self) -> bool:
        """Nothing of the command heard yet and the client not ended otherwise than 255: its
        stderr may be the client's own complaint, which `unreachable` turns into one line."""
        return not self.got_output and self.p.poll() in (None, 255)

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Input closed; the client given `wait` seconds to end with its command, then stopped."""
        if self._closed:
            return
        self.shutdown_write()
        try:
            self.p.wait(wait)
        except subprocess.TimeoutExpired:
            self.p.terminate()
            try:
                self.p.wait(self.CLOSE_WAIT)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        for f in (self.p.stdout, self.p.stderr):
            if f is not None:
                f.close()
        self._closed = True


def wait_readable(ch: Any, timeout: float) -> None:
    """Until `ch` (a paramiko channel or a `ProcessChannel`) has something to read, or `timeout`."""
    fds = ch.fds if isinstance(ch, ProcessChannel) else [ch]
    if fds:
        select.select(fds, [], [], timeout)
    else:
        time.sleep(min(timeout, 0.05))


# -- the OpenSSH client holding one local forward (supervised by rig/forward) ----------------

def client_forward_argv(jump: Target, local_port: int, target: str, known_hosts: Path,
                        key_file: Path | None) -> list[str]:
    """`ssh -N -L 127.0.0.1:PORT:TARGET` through `jump`: the host key only from `known_hosts`
    (no global file, never added), no config file or agent, and the client exits when the
    forward cannot listen or the jump host stops answering (about 10 s)."""
    def path(p: Path) -> str:
        return f'"{p}"' if any(c.isspace() for c in str(p)) else str(p)

    # `-o "Option value"` (ssh_config's other spelling) rather than `Option=value`: the masked log
    # would show StrictHostKeyChecking=*** (a KEY-named assignment), hiding that it is yes.
    opts = {"BatchMode": "yes", "StrictHostKeyChecking": "yes", "UserKnownHostsFile": path(known_hosts),
            "GlobalKnownHostsFile": "/dev/null", "UpdateHostKeys": "no", "IdentitiesOnly": "yes",
            "ExitOnForwardFailure": "yes", "ServerAliveInterval": "5", "ServerAliveCountMax": "2",
            "ConnectTimeout": f"{CONNECT_TIMEOUT * 2:.0f}", "KexAlgorithms": "curve25519-sha256"}
    argv = ["ssh", "-N", "-F", "none", "-L", f"127.0.0.1:{local_port}:{target}"]
    for k, v in opts.items():
        argv += ["-o", f"{k} {v}"]
    if key_file is not None:
        argv += ["-i", str(key_file)]
    return argv + ["-p", str(jump.port), f"{jump.user}@{jump.host}"]


def _die_with_parent() -> None:
    # The client must not outlive its supervisor, even when the supervisor is SIGKILLed.
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM


def start_client_forward(argv: list[str]) -> subprocess.Popen[bytes]:
    """Start the OpenSSH client of `client_forward_argv`; its stderr is a pipe for the supervisor."""
    log.debug("ssh: %s", mask_argv(argv))
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, preexec_fn=_die_with_parent)


# A retry gets the same answer until someone acts: a pin, a key, a name, the local port.
LASTING = ("host-key", "login", "port", "resolve")


@dataclass(frozen=True)
class ClientFailure:
    kind: str  # host-key | login | port | resolve | refused | timeout | other
    line: str

    @property
    def lasting(self) -> bool:
        return self.kind in LASTING


_KINDS = {sshfail.Cause.NOT_PINNED: "host-key", sshfail.Cause.CHANGED: "host-key",
          sshfail.Cause.LOGIN: "login", sshfail.Cause.KEY_FILE: "login",
          sshfail.Cause.RESOLVE: "resolve", sshfail.Cause.REFUSED: "refused",
          sshfail.Cause.TIMEOUT: "timeout"}


def client_failure(stderr: str, jump: Target, known_hosts: Path) -> ClientFailure:
    """Why the forward's OpenSSH client gave up, as one masked line, from what it wrote on stderr:
    the jump host's failure classified as every command's (`lanes.base.sshfail`), or the port."""
    if "Address already in use" in stderr or "cannot listen to port" in stderr:
        return ClientFailure("port", "the local port is in use by another program")
    f = sshfail.from_openssh(stderr, jump, None, known_hosts)
    f = sshfail.Failure(f.cause, str(jump), True, f.detail)
    return ClientFailure(_KINDS.get(f.cause, "other"), f.line())
