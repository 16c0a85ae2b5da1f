"""The one place that opens SSH connections: paramiko (`Connection`) here, and the OpenSSH client
in `lanes.base.openssh` (`OpenSsh`: a gate's channel, one `ssh` process per command; and the held
forwards), which shares this module's pins, errors and targets.

Host keys are always pinned from a known_hosts file: an unknown or changed host
key is refused (`RejectPolicy`, or `StrictHostKeyChecking=yes`), never added.
Commands are logged masked. Payloads are written to the channel directly, in
large chunks (never through fabric/invoke's `in_stream`, which moves about
100 bytes/s). paramiko is imported only when a `Connection` connects: a gate
(`OpenSsh`) starts without it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import select
import shlex
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.mask import mask, mask_argv
from lanes.base.sshargv import jump_says, route_argv
from lanes.base.sshfail import Cause, Failure, error, from_exception, from_openssh, local_problem
from lanes.base.sshfail import HostKeyError as HostKeyError  # the errors, with their causes
from lanes.base.sshfail import SshError as SshError
from lanes.base.sshfail import Unreachable as Unreachable

if TYPE_CHECKING:
    import paramiko

log = logging.getLogger("nev.ssh")

CONNECT_TIMEOUT = 5.0


def load() -> None:
    """Load the SSH stack now, in this thread (it is otherwise loaded on the first connect): a
    caller about to connect from several threads at once (the dashboard's collectors) loads it
    first, so that no thread sees a half-imported paramiko."""
    import paramiko  # noqa: F401


def quiet_paramiko() -> None:
    """paramiko's own log lines (`Secsh channel 0 open FAILED: ...` when a jump host refuses the
    channel to a lane that is down) shown only with `-v` (debug logging): without it nev says what
    failed in its own one line (SshError), and `nev lane list` prints its table and nothing else."""
    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    logging.getLogger("paramiko").setLevel(logging.NOTSET if debug else logging.CRITICAL + 1)
CHUNK = 256 * 1024
EOF_GRACE = 2.0


@dataclass(frozen=True)
class Target:
    """A lane address: [user@]host[:port]."""

    host: str
    user: str = "lane"
    port: int = 22

    @classmethod
    def parse(cls, spec: str, default_user: str = "lane") -> Target:
        s = spec.strip()
        if not s:
            raise SshError("empty SSH address; give one as [user@]host[:port]")
        user = default_user
        if "@" in s:
            user, s = s.rsplit("@", 1)
        port, p = 22, None
        if s.startswith("["):
            host, _, rest = s[1:].partition("]")
            if rest.startswith(":"):
                p = rest[1:]
        elif s.count(":") == 1:
            host, p = s.split(":")
        else:
            host = s
        if p is not None:
            port = int(p) if p.isascii() and p.isdigit() else 0
            if not 1 <= port <= 65535:
                raise SshError(f"SSH address {spec!r} has a bad port (1-65535); give [user@]host[:port]")
        return cls(host=host, user=user, port=port)

    def __str__(self) -> str:
        return f"{self.user}@{self.host}" + (f":{self.port}" if self.port != 22 else "")

    @property
    def known_hosts_name(self) -> str:
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


@dataclass
class Result:
    exit_status: int
    stdout: bytes
    stderr: bytes

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")

    def last_err(self) -> str:
        """The last line of stderr that says something, masked; `exit N` when there is none."""
        lines = [ln.strip() for ln in self.err.splitlines() if ln.strip()]
        return mask(lines[-1]) if lines else f"exit {self.exit_status}"


def default_known_hosts() -> Path:
    p = settings.get_path(settings.KNOWN_HOSTS)
    return p if p is not None else Path.home() / ".ssh" / "known_hosts"


def default_key_file() -> Path | None:
    return settings.get_path(settings.SSH_KEY)


# -- the kept connection (docs/lanes.md, "The kept connection") ------------------------------

#: the longest control socket path a Unix socket takes (108 bytes with its NUL, less ssh's margin)
CONTROL_PATH_MAX = 100


def control_folder(environ: Mapping[str, str] | None = None) -> Path:
    """Where the kept connections' sockets live: `$XDG_RUNTIME_DIR/nev-ssh` (the user's own
    runtime folder, mode 0700 by the login manager), else `~/.cache/nev/ssh`."""
    env = os.environ if environ is None else environ
    run = env.get("XDG_RUNTIME_DIR", "")
    if run and os.path.isabs(run) and os.path.isdir(run):
        return Path(run) / "nev-ssh"
    return Path(env.get("HOME") or Path.home()) / ".cache" / "nev" / "ssh"


def folder_problem(folder: Path) -> str | None:
    """Why `folder` may not hold a kept connection's socket (None: it may): it must be a real
    folder (no link), this user's, and reachable by no one else (mode 0700)."""
    try:
        st = os.lstat(folder)
    except OSError as e:
        return f"{folder}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a folder"
    if st.st_uid != os.getuid():
        return f"{folder} belongs to uid {st.st_uid}, not to this user"
    if st.st_mode & 0o077:
        return f"{folder} is mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
    return None


def control(target: Target, jump: Target | None, known_hosts: Path, key_file: Path | None,
            environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """The socket and the ControlPersist seconds of the kept connection to `target` (through
    `jump`), or None for a connection of its own: NEV_SSH_PERSIST is 0, or the socket's folder
    could not be made or is not this user's alone (one `-v` line says which; a plain connection
    then). The folder is made mode 0700 and checked before every use; the socket's name is a
    hash of the user, both hops, the pins and the key, so it says nothing about the host."""
    persist = settings.get_int(settings.SSH_PERSIST, environ)
    if persist <= 0:
        return None
    folder = control_folder(environ)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as e:
        log.debug("ssh: no kept connection: cannot make %s (%s); a connection of its own",
                  folder, e.strerror)
        return None
    problem = folder_problem(folder)
    if problem is not None:
        log.debug("ssh: no kept connection: %s; a connection of its own", problem)
        return None
    who = "\0".join((str(os.getuid()), str(target), str(jump or ""), str(known_hosts),
                     str(key_file or "")))
    path = str(folder / hashlib.sha256(who.encode()).hexdigest()[:24])
    if len(path) > CONTROL_PATH_MAX:
        log.debug("ssh: no kept connection: %s is too long for a socket; a connection of its own",
                  path)
        return None
    return path, persist


class Connection:
    """One SSH connection to a host whose key is pinned."""

    def __init__(self, target: Target, known_hosts: Path | None = None,
                 key_file: Path | None = None, timeout: float = CONNECT_TIMEOUT,
                 via: Connection | None = None, jump: Target | None = None) -> None:
        self.target = target
        self.via = via  # a jump host's open connection: this one runs over its direct-tcpip channel
        self.jump = jump  # or a jump host this connection opens (and closes) itself
        self.known_hosts = known_hosts or default_known_hosts()
        self.key_file = key_file if key_file is not None else default_key_file()
        self.timeout = timeout
        self._client: paramiko.SSHClient | None = None
        self._own_jump: Connection | None = None

    # -- connecting -----------------------------------------------------
    def connect(self) -> Connection:
        if self._client is not None:
            return self
        quiet_paramiko()
        problem = local_problem(self.key_file, self.known_hosts)
        if problem is not None:
            raise error(Failure(problem[0], str(self.jump or self.target), self.jump is not None,
                                problem[1]), self.route)
        if log.isEnabledFor(logging.DEBUG):
            by_hand = route_argv(self.target, self.jump, self.known_hosts, self.key_file,
                                 self.timeout, "true")
            log.debug("ssh %s (paramiko); by hand: %s", self.route, mask_argv(by_hand))
        client = self._pinned_client()
        kw: dict = dict(hostname=self.target.host, port=self.target.port, username=self.target.user,
                        timeout=self.timeout, banner_timeout=self.timeout, auth_timeout=self.timeout,
                        allow_agent=False, look_for_keys=self.key_file is None)
        if self.key_file is not None:
            kw["key_filename"] = str(self.key_file)
        tunnel = self._tunnel()
        if tunnel is not None:
            kw["sock"] = tunnel
        try:
            _open(client, kw, self.target, self.route, self.known_hosts)
        except BaseException:
            self._close_jump()
            raise
        t = client.get_transport()
        if t is not None:
            t.set_keepalive(15)
        self._client = client
        return self

    def _pinned_client(self) -> paramiko.SSHClient:
        """A client that knows only the host keys pinned in known_hosts and refuses any other."""
        import paramiko

        client = paramiko.SSHClient()
        client.load_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        return client

    def _tunnel(self) -> paramiko.Channel | None:
        """The channel to the target through the jump host (opened here when this connection has
        its own), or None for a direct connection."""
        if self.via is None and self.jump is not None:
            # Both hops pinned in the same known_hosts file, with the same key.
            try:
                self._own_jump = Connection(self.jump, self.known_hosts, self.key_file, self.timeout).connect()
            except Unreachable as e:
                f = e.failure or Failure(e.cause, str(self.jump), True, e.message)
                raise error(Failure(f.cause, str(self.jump), True, f.detail), self.route) from None
            self.via = self._own_jump
        if self.via is None:
            return None
        import paramiko

        try:
            return self.via.transport.open_channel(
                "direct-tcpip", (self.target.host, self.target.port), ("127.0.0.1", 0), timeout=self.timeout)
        except (paramiko.SSHException, OSError) as e:
            raise error(self._through_jump(from_exception(e, self.target)), self.route) from None

    def _through_jump(self, f: Failure) -> Failure:
        """paramiko hears only `Connect failed` when the jump host cannot reach the target: the
        OpenSSH client asks the jump host once more and says why (refused, no such name...)."""
        if f.cause is not Cause.JUMP_CONNECT or self.via is None:
            return f
        said = jump_says(self.via.target, self.target, self.known_hosts, self.key_file,
                         self.timeout)
        better = from_openssh(said, self.target, self.via.target, self.known_hosts)
        return f if better.cause is Cause.OTHER or better.at_jump else better

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._close_jump()

    def _close_jump(self) -> None:
        if self._own_jump is not None:
            self._own_jump.close()
            self._own_jump = None
            self.via = None

    @property
    def route(self) -> str:
        """How this connection reaches its host, for messages: `lane@h` or `lane@h via jump@j`."""
        hop = self.jump or (self.via.target if self.via is not None else None)
        return f"{self.target}" + (f" via {hop}" if hop else "")

    def __enter__(self) -> Connection:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def transport(self) -> paramiko.Transport:
        self.connect()
        assert self._client is not None
        t = self._client.get_transport()
        if t is None or not t.is_active():
            raise SshError(f"SSH connection to {self.target} is closed")
        return t

    # -- commands -------------------------------------------------------
    def open_session(self, command: str | list[str], env: dict[str, str] | None = None) -> paramiko.Channel:
        cmd = command if isinstance(command, str) else shlex.join(command)
        log.debug("ssh %s: %s", self.target, mask(cmd))
        ch = self.transport.open_session(timeout=self.timeout)
        if env:
            # Environment is passed inside the command so it never depends on AcceptEnv.
            prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            cmd = f"env {prefix} {cmd}"
        ch.exec_command(cmd)
        return ch

    def run(self, command: str | list[str], stdin: bytes | Iterable[bytes] | None = None,
            on_stdout: Callable[[bytes], None] | None = None,
            on_stderr: Callable[[bytes], None] | None = None,
            timeout: float | None = None, check: bool = False) -> Result:
        """Run a command; stream stdin to it; collect or stream its output."""
        ch = self.open_session(command)
        out: list[bytes] = []
        err: list[bytes] = []
        writer = _feed(ch, stdin)
        deadline = None if timeout is None else time.monotonic() + timeout
        if not _pump(ch, on_stdout or out.append, on_stderr or err.append, deadline):
            ch.close()
            raise SshError(f"command on {self.target} timed out after {timeout:.0f} s")
        status = ch.recv_exit_status()
        if writer is not None:
            writer.join(timeout=5)
        res = Result(status, b"".join(out), b"".join(err))
        if check and status != 0:
            raise SshError(f"command on {self.target} failed (exit {status}): {res.last_err()}")
        return res

    def read_file(self, path: str) -> bytes:
        res = self.run(["cat", "--", path])
        if res.exit_status != 0:
            raise SshError(f"cannot read {path} on {self.target}: {mask(res.err.strip())}")
        return res.stdout

    def write_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        """Write a file through stdin (never argv), created with `mode` from the start."""
        cmd = (f"umask 077 && tmp={shlex.quote(path)}.tmp.$$ && cat > \"$tmp\" && "
               f"chmod {mode:o} \"$tmp\" && mv -f \"$tmp\" {shlex.quote(path)}")
        self.run(cmd, stdin=data, check=True)

    # -- port forwarding -------------------------------------------------
    def forward(self, remote_host: str, remote_port: int, local_port: int = 0,
                local_host: str = "127.0.0.1") -> Forward:
        return Forward(self, remote_host, remote_port, local_host, local_port)


def _open(client: paramiko.SSHClient, kw: dict, target: Target, route: str,
          known_hosts: Path) -> None:
    """`client.connect(**kw)`, its failures classified (`lanes.base.sshfail`): HostKeyError for a
    key not pinned or not matching, else Unreachable, naming the cause."""
    import paramiko

    t0 = time.monotonic()
    try:
        client.connect(**kw)
    except (paramiko.SSHException, OSError, EOFError) as e:
        f = from_exception(e, target, known_hosts=known_hosts)
        if f.cause is Cause.OTHER and time.monotonic() - t0 >= 0.9 * float(kw["timeout"]):
            # a host that took the connection and never spoke: paramiko's words vary
            # ("No existing session", an EOF), the clock does not
            f = Failure(Cause.TIMEOUT, f.host, f.at_jump,
                        f"no answer in {kw['timeout']:.0f} s: {f.detail}")
        raise error(f, route) from None


def _feed(ch: paramiko.Channel, stdin: bytes | Iterable[bytes] | None) -> threading.Thread | None:
    """`stdin` sent in large chunks by a thread of its own, then the channel's input closed (at once
    when there is nothing to send)."""
    if stdin is None:
        ch.shutdown_write()
        return None
    chunks: Iterable[bytes] = [stdin] if isinstance(stdin, bytes | bytearray) else stdin

    def feed() -> None:
        try:
            for c in chunks:
                view = memoryview(c)
                for i in range(0, len(view), CHUNK):
                    ch.sendall(bytes(view[i:i + CHUNK]))
            ch.shutdown_write()
        except BaseException:  # noqa: BLE001 - a command that stopped reading: its result says why
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    return writer


def _pump(ch: paramiko.Channel, to_out: Callable[[bytes], None], to_err: Callable[[bytes], None],
          deadline: float | None) -> bool:
    """The command's output passed on until it is done; False when `deadline` came first."""
    exited_at: float | None = None
    while True:
        select.select([ch], [], [], 0.2)
        got = _drain(ch.recv_ready, ch.recv, to_out) | _drain(ch.recv_stderr_ready, ch.recv_stderr, to_err)
        # The exit status can arrive before the last output: stop at EOF, or a moment after the
        # exit status when a background child still holds the output open (no EOF would come).
        if ch.exit_status_ready() and not ch.recv_ready() and not ch.recv_stderr_ready():
            if exited_at is None:
                exited_at = time.monotonic()
            if ch.eof_received or time.monotonic() - exited_at > EOF_GRACE:
                return True
        if ch.closed and not got:
            return True
        if deadline is not None and time.monotonic() > deadline:
            return False


def _drain(ready: Callable[[], bool], recv: Callable[[int], bytes], to: Callable[[bytes], None]) -> bool:
    """What is ready on one stream passed on; True when there was any."""
    got = False
    while ready():
        to(recv(CHUNK))
        got = True
    return got


class Forward:
    """A local TCP port forwarded to host:port as seen from the SSH server."""

    def __init__(self, conn: Connection, remote_host: str, remote_port: int,
                 local_host: str, local_port: int) -> None:
        self.conn = conn
        self.remote = (remote_host, remote_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((local_host, local_port))
        self.sock.listen(16)
        self.local_port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            r, _, _ = select.select([self.sock], [], [], 0.2)
            if not r:
                continue
            try:
                client, addr = self.sock.accept()
            except OSError:
                return
            try:
                ch = self.conn.transport.open_channel("direct-tcpip", self.remote, addr)
            except Exception:  # noqa: BLE001 - the client sees a closed socket
                client.close()
                continue
            threading.Thread(target=pipe, args=(client, ch), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()

    def __enter__(self) -> Forward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pipe(sock: socket.socket, ch: paramiko.Channel | socket.socket) -> None:
    """Copy bytes both ways between a socket and a channel (or another socket) until one side
    closes; then close both."""
    try:
        while True:
            watch: list[Any] = [sock, ch]
            r, _, _ = select.select(watch, [], [], 1.0)
            if sock in r:
                data = sock.recv(CHUNK)
                if not data:
                    break
                ch.sendall(data)
            if ch in r:
                data = ch.recv(CHUNK)
                if not data:
                    break
                sock.sendall(data)
    except OSError:
        pass
    finally:
        ch.close()
        sock.close()


def answers(target: Target, known_hosts: Path | None = None, key_file: Path | None = None,
            timeout: float = CONNECT_TIMEOUT, jump: Target | None = None) -> bool:
    """True when the host accepts a BatchMode-style login within `timeout` and runs `true`."""
    try:
        with Connection(target, known_hosts, key_file, timeout, jump=jump) as c:
            return c.run("true", timeout=timeout).exit_status == 0
    except NevError:
        return False




def offered_key(target: Target, jump: Target | None = None, timeout: float = CONNECT_TIMEOUT,
                known_hosts: Path | None = None, key_file: Path | None = None) -> tuple[str, str]:
    """The host key `target` offers, (type, base64), read by a key exchange with no login (through
    `jump`, pinned and logged into as every hop is, when given): what `nev rig trust` shows before
    it pins anything."""
    import paramiko

    via = Connection(jump, known_hosts, key_file, timeout).connect() if jump is not None else None
    route = f"{target}" + (f" via {jump}" if jump else "")
    t = None
    try:
        if via is not None:
            sock: Any = via.transport.open_channel("direct-tcpip", (target.host, target.port),
                                                   ("127.0.0.1", 0), timeout=timeout)
        else:
            sock = socket.create_connection((target.host, target.port), timeout=timeout)
        t = paramiko.Transport(sock)
        t.start_client(timeout=timeout)
        key = t.get_remote_server_key()
        return key.get_name(), key.get_base64()
    except (paramiko.SSHException, OSError, EOFError) as e:
        raise error(from_exception(e, target), route) from None
    finally:
        if t is not None:
            t.close()
        if via is not None:
            via.close()


def fingerprint(b64: str) -> str:
    """`SHA256:...` of a host key, as `ssh-keygen -lf` prints it."""
    import base64
    import hashlib

    digest = hashlib.sha256(base64.b64decode(b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def link_errors() -> tuple[type[BaseException], ...]:
    """What a broken SSH link raises: OSError and EOFError, and paramiko's SSHException when
    paramiko is loaded (a gate over `OpenSsh` never loads it)."""
    pk = sys.modules.get("paramiko")
    return (OSError, EOFError) + ((pk.SSHException,) if pk is not None else ())
