"""The dev-box side of a gate: pick a lane, ship the worktree, stream the run, pull, clean up.

`run()` is `nev lane run` (lane-only unless told otherwise) and `on()` is `nev lane on`. One SSH
channel carries the whole conversation with the lane program (`lanes/apply.py`): hello (the
mirror's tips, free disk), the payload, the streamed output, pulled folders and the result. An
interrupt (SIGINT/SIGTERM) asks the lane to stop the command's whole process tree and exits
130/143; a dropped connection is followed by a second SSH call that stops the run and removes
the three `.env` files.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from lanes import config, forgeauth, payload, settings, ui
from lanes.apply import FRAME, check_rel
from lanes.config import Lane, LanesFile
from lanes.errors import DiskShortError, NevError, NoLaneError
from lanes.mask import mask, register_secret
from lanes.ssh import CONNECT_TIMEOUT, Connection, SshError


# The disk guard's sweep (issue 5 provides it): called as SWEEP_HOOK(lane, track) when the lane
# root is short of NEV_LANE_MIN_FREE_GB before a run; the guard then asks the lane again.
def _sweep(lane: Lane, track: str) -> None:
    from lanes import sweep

    sweep.gate_hook(lane, track)


SWEEP_HOOK: Callable[[Lane, str], object] | None = _sweep

STOP_WAIT = 3.0
DROPPED_EXIT = 255


class Interrupted(NevError):
    """SIGINT/SIGTERM on the dev box during a gate; the lane's command was stopped too."""


class _Term(BaseException):
    pass


@dataclass(frozen=True)
class Forge:
    url: str | None
    user: str | None = None
    password: str | None = None

    def cred(self) -> dict[str, str] | None:
        return {"user": self.user or "nev", "password": self.password} if self.password else None


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(url without user:token, user, token)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or "@" not in parts.netloc:
        return url, None, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, token = userinfo.partition(":")
    clean = urllib.parse.urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return clean, urllib.parse.unquote(user) or None, urllib.parse.unquote(token) or None


def forge_for(wt: payload.Worktree, lf: LanesFile) -> Forge:
    """The forge URL the lane mirror fetches from, and the credential kept out of every argv
    (`lanes.forgeauth.lookup`; a user and token inside the URL come last)."""
    raw = settings.get(settings.LANE_GIT_URL) or lf.git_url
    if not raw:
        cp = wt.repo.git("remote", "get-url", "origin", check=False)
        raw = cp.stdout.strip() if cp.returncode == 0 else None
    if not raw:
        return Forge(None)
    url, user, token = split_credentials(raw)
    cred = forgeauth.lookup(wt.repo)
    register_secret(token)
    return Forge(url, cred.user or user, cred.token or token)


def pick_lane(lf: LanesFile, index: int | None,
              timeout: float = CONNECT_TIMEOUT) -> tuple[Lane, Connection] | None:
    """The first lane (or lane `index`) that accepts a key login within `timeout`."""
    for lane in config.pick(lf, index):
        conn = lane.connection(timeout)
        try:
            conn.connect()
        except SshError as e:
            ui.info(f"{lane.label} ({lane.ssh}) does not answer: {e}")
            continue
        return lane, conn
    return None


class Session:
    """One conversation with the lane program over one SSH channel."""

    def __init__(self, conn: Connection, lane: Lane) -> None:
        self.conn = conn
        self.lane = lane
        self.ch: paramiko.Channel = conn.open_session(payload.lane_command())
        self.buf = bytearray()
        self.sent = 0
        self.send(payload.lane_program())

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        for i in range(0, len(view), 256 * 1024):
            self.ch.sendall(bytes(view[i:i + 256 * 1024]))
        self.sent += len(data)

    def send_json(self, obj: dict[str, Any]) -> None:
        import json

        data = json.dumps(obj).encode()
        self.send(FRAME.pack(b"J", len(data)) + data)

    def frames(self, timeout: float | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Frames as they arrive; ends when the channel closes (or `timeout` passes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            while len(self.buf) >= FRAME.size:
                kind, n = FRAME.unpack(self.buf[:FRAME.size])
                if len(self.buf) < FRAME.size + n:
                    break
                data = bytes(self.buf[FRAME.size:FRAME.size + n])
                del self.buf[:FRAME.size + n]
                yield kind, data
            if deadline is not None and time.monotonic() > deadline:
                return
            select.select([self.ch], [], [], 0.2)
            while self.ch.recv_stderr_ready():
                for line in self.ch.recv_stderr(65536).decode(errors="replace").splitlines():
                    ui.info(f"{self.lane.label}: {line}")
            if self.ch.recv_ready():
                data = self.ch.recv(256 * 1024)
                if not data:
                    return
                self.buf += data
            elif self.ch.closed or (self.ch.exit_status_ready() and not self.ch.recv_ready()):
                if not self.ch.recv_ready() and not self.ch.recv_stderr_ready():
                    return

    def close(self) -> None:
        self.ch.close()


@dataclass
class Outcome:
    status: int
    result: dict[str, Any]
    bytes_sent: int                 # over the gate's channel: program, requests, payload
    payload_sizes: dict[str, int]


def _hello(session: Session, wt: payload.Worktree, forge: Forge) -> dict[str, Any]:
    import json

    session.send_json({"op": "hello", "name": wt.name, "root": session.lane.root,
                       "shared": session.lane.shared_dir, "git_url": forge.url,
                       "fetch_max_age": settings.get_float(settings.LANE_FETCH_MAX_AGE),
                       "min_free_gb": settings.get_float(settings.LANE_MIN_FREE_GB)})
    for kind, data in session.frames():
        if kind == b"M":
            ui.info(f"{session.lane.label}: {data.decode(errors='replace')}")
        elif kind == b"H":
            return json.loads(data)
        elif kind == b"R":
            res = json.loads(data)
            raise NevError(f"{session.lane.label}: {res.get('refused', 'the lane program stopped')}")
    raise SshError(f"{session.lane.label}: the lane program ended before answering (is python3 installed there?)")


def disk_short_message(lane: Lane, hello: dict[str, Any], need: float) -> str:
    copies = hello.get("copies") or []
    largest = ", ".join(f"{c['name']} ({c['kb'] / 1e6:.1f} GB)" for c in copies[:3]) or "no copies"
    return (f"lane {lane.index} has {hello['free_gb']:.1f} GB free under {lane.root} even after a sweep "
            f"(needs {need:g} GB, NEV_LANE_MIN_FREE_GB); largest copies: {largest}; nothing ran")


def _interrupt_handlers() -> Callable[[], None]:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_term(signum: int, frame: object) -> None:
        raise _Term()

    old = signal.signal(signal.SIGTERM, on_term)

    def restore() -> None:
        signal.signal(signal.SIGTERM, old)
    return restore


def gate_on_lane(lane: Lane, conn: Connection, wt: payload.Worktree, command: Sequence[str], *,
                 forge: Forge, pull: Sequence[str] = (), extra_env: dict[str, str] | None = None,
                 sweep: Callable[[Lane, str], object] | None = None,
                 on_stdout: Callable[[bytes], None] | None = None,
                 on_stderr: Callable[[bytes], None] | None = None) -> Outcome:
    """Run `command` for `wt` on an answering lane; the exit status is the command's."""
    import json

    out = on_stdout or _write(sys.stdout)
    err = on_stderr or _write(sys.stderr)
    keep_env = settings.get_flag(settings.LANE_KEEP_ENV)
    min_free = settings.get_float(settings.LANE_MIN_FREE_GB)
    restore = _interrupt_handlers()
    session: Session | None = None
    first_session: Session | None = None
    hello: dict[str, Any] = {}
    result: dict[str, Any] | None = None
    sizes: dict[str, int] = {}
    try:
        session = first_session = Session(conn, lane)
        hello = _hello(session, wt, forge)
        if hello["free_gb"] < min_free:
            session.send_json({"op": "abort"})
            session.close()
            hook = sweep or SWEEP_HOOK
            if hook is not None:
                ui.info(f"{lane.label}: {hello['free_gb']:.1f} GB free, under {min_free:g} GB; sweeping the lane")
                hook(lane, wt.name)
            else:
                ui.info(f"{lane.label}: {hello['free_gb']:.1f} GB free, under {min_free:g} GB; "
                        "no sweep is installed (lanes.gate.SWEEP_HOOK), checking again")
            session = Session(conn, lane)
            hello = _hello(session, wt, forge)
            if hello["free_gb"] < min_free:
                session.send_json({"op": "abort"})
                raise DiskShortError(disk_short_message(lane, hello, min_free))
        p = payload.build(wt, hello.get("tips", []), forge.url is not None)
        sizes = p.sizes()
        env = dict(extra_env or {})
        session.send_json({"op": "payload", "commit": p.commit, "sizes": sizes, "command": list(command),
                           "env": env, "cred": forge.cred(), "keep_env": keep_env, "pull": list(pull)})
        for member in p.members():
            session.send(member)
        pulling: tuple[str, Any, Any] | None = None
        for kind, data in session.frames():
            if kind == b"O":
                out(data)
            elif kind == b"E":
                err(data)
            elif kind == b"M":
                ui.info(f"{lane.label}: {data.decode(errors='replace')}")
            elif kind == b"N":
                tips = json.loads(data)["tips"]
                ui.info(f"{lane.label}: the forge could not supply the bundle's basis; sending a bundle over the lane's own commits")
                b = payload.bundle(wt.repo, wt.commit, payload.known_commits(wt.repo, tips))
                session.send_json({"op": "bundle", "size": len(b)})
                session.send(b)
                sizes["bundle_resent"] = len(b)
            elif kind == b"Q":
                d = json.loads(data)["dir"]
                check_rel(d.rstrip("/"), "--pull")
                tmp = tempfile.TemporaryFile()
                pulling = (d, tmp, None)
            elif kind == b"P" and pulling is not None:
                pulling[1].write(data)
            elif kind == b"q" and pulling is not None:
                _extract_pull(wt.path, pulling[0], pulling[1])
                ui.info(f"{lane.label}: pulled {pulling[0]}")
                pulling = None
            elif kind == b"R":
                result = json.loads(data)
                break
    except (KeyboardInterrupt, _Term) as e:
        sig = "INT" if isinstance(e, KeyboardInterrupt) else "TERM"
        code = 130 if sig == "INT" else 143
        stopped = _stop(session, sig)
        if not stopped:
            _second_call(lane, wt, hello.get("pid"), keep_env)
        raise Interrupted(f"interrupted; the command on {lane.label} was stopped", code) from None
    finally:
        restore()
        if session is not None:
            session.close()
    if result is None:
        cleanup = _second_call(lane, wt, hello.get("pid"), keep_env)
        raise NevError(f"the connection to {lane.label} dropped mid-run; {cleanup}", DROPPED_EXIT)
    if result.get("refused"):
        raise NevError(f"{lane.label} refused the gate: {result['refused']}")
    if result.get("stopped"):
        raise Interrupted(f"the command on {lane.label} was stopped", 130 if result["stopped"] == "INT" else 143)
    sent = session.sent if session else 0
    if session is not None and session is not first_session:
        sent += first_session.sent if first_session else 0
    return Outcome(int(result["status"]), result, sent, sizes)


def _write(stream: Any) -> Callable[[bytes], None]:
    def w(data: bytes) -> None:
        stream.buffer.write(data)
        stream.buffer.flush()
    return w


def _extract_pull(root: Path, d: str, tmp: Any) -> None:
    tmp.seek(0)
    dest = root / d
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=tmp, mode="r:gz") as tf:
        tf.extractall(dest, filter="data")
    tmp.close()


def _stop(session: Session | None, sig: str) -> bool:
    """Ask the lane to stop the command's process tree; True when it confirmed."""
    if session is None or session.ch.closed:
        return False
    try:
        session.send_json({"op": "stop", "signal": sig})
        for kind, _ in session.frames(timeout=STOP_WAIT):
            if kind == b"R":
                return True
    except (OSError, paramiko.SSHException, EOFError):
        return False
    return False


def _second_call(lane: Lane, wt: payload.Worktree, pid: int | None, keep_env: bool) -> str:
    """A fresh SSH connection that stops the run (if still there) and removes the .env files."""
    import json

    try:
        with lane.connect() as conn:
            s = Session(conn, lane)
            s.send_json({"op": "cleanup", "root": lane.root, "name": wt.name, "pid": pid,
                         "keep_env": keep_env})
            for kind, data in s.frames(timeout=15):
                if kind == b"R":
                    res = json.loads(data)
                    if res.get("busy"):
                        return "another gate of this worktree holds the lane copy; it removes its own .env"
                    return "the lane copy's .env files were removed over a second SSH call"
    except (NevError, OSError, paramiko.SSHException) as e:
        return f"the second SSH call to remove the .env files failed too ({mask(str(e))}); run it again with `nev lane run`"
    return "the second SSH call got no answer"


def run_local(worktree: Path, command: Sequence[str], extra_env: dict[str, str] | None = None) -> int:
    """Run in place (already on a lane, or the local fallback of `nev lane on`)."""
    if not worktree.is_dir():
        raise NevError(f"worktree {worktree} does not exist; give the folder of a git worktree")
    env = dict(os.environ)
    env.update(extra_env or {})
    try:
        p = subprocess.Popen(list(command), cwd=worktree, env=env)
    except FileNotFoundError:
        raise NevError(f"command not found: {command[0]}", 127) from None
    restore = _interrupt_handlers()
    try:
        return p.wait()
    except (KeyboardInterrupt, _Term) as e:
        sig = signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM
        p.send_signal(sig)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
        raise Interrupted("interrupted", 130 if sig == signal.SIGINT else 143) from None
    finally:
        restore()


def already_on_lane() -> bool:
    """NEV_ON_LANE is set (to anything): this machine is a lane, and a gate runs its command here."""
    return bool(settings.get(settings.ON_LANE))


def in_place(worktree: Path, command: Sequence[str], pull: Sequence[str] = (),
             extra_env: dict[str, str] | None = None) -> int:
    """The command in `worktree` on this machine, already a lane: no lane settings read, `--pull`
    ignored (the outputs are where they belong); the status is the command's."""
    if pull:
        ui.info("already on a lane (NEV_ON_LANE): --pull ignored")
    return run_local(worktree, command, extra_env)


def run(worktree: Path, command: list[str], *, lane_index: int | None = None, lane_only: bool = True,
        pull: Sequence[str] = (), extra_env: dict[str, str] | None = None,
        sweep: Callable[[Lane, str], object] | None = None) -> int:
    """`nev lane run`: the command's exit status; NoLaneError (3) when no lane answers and lane-only.

    Already on a lane (NEV_ON_LANE set) it runs in place, as `nev lane on` does."""
    if not command:
        raise NevError("no command given; say what to run on the lane")
    if already_on_lane():
        return in_place(Path(worktree), command, pull, extra_env)
    for d in pull:
        check_rel(d.rstrip("/"), "--pull")
    wt = payload.Worktree.open(Path(worktree))
    lf = config.configured(require=lane_only)
    picked = pick_lane(lf, lane_index) if lf.lanes else None
    if picked is None:
        if lane_only:
            where = "NEV_LANE_SSH" if settings.get(settings.LANE_SSH) else lf.path
            raise NoLaneError(f"no build lane answered (lanes from {where}); nothing ran, here or there")
        ui.info("no build lane answered; running on this machine")
        return run_local(wt.path, command, extra_env)
    lane, conn = picked
    forge = forge_for(wt, lf)
    try:
        return gate_on_lane(lane, conn, wt, command, forge=forge, pull=pull, extra_env=extra_env,
                            sweep=sweep).status
    finally:
        conn.close()


def on(worktree: Path, command: list[str], *, lane_only: bool = False, pull: Sequence[str] = (),
       extra_env: dict[str, str] | None = None, lane_index: int | None = None) -> int:
    """`nev lane on`: in place when NEV_ON_LANE is set; else a gate, lane-only when asked or strict."""
    if already_on_lane():
        return in_place(Path(worktree), command, pull, extra_env)
    strict = lane_only or settings.get_flag(settings.LANE_STRICT)
    return run(Path(worktree), command, lane_index=lane_index, lane_only=strict, pull=pull,
               extra_env=extra_env)


def lane_status() -> list[dict[str, Any]]:
    """`nev lane list`: every configured lane, answering or not, free disk, copies, gates running."""
    import json

    lf = config.configured(require=False)
    rows: list[dict[str, Any]] = []
    for lane in lf.lanes:
        row: dict[str, Any] = {"index": lane.index, "ssh": lane.ssh, "name": lane.name, "root": lane.root,
                               "answers": False, "free_gb": None, "copies": [], "running": []}
        t0 = time.monotonic()
        try:
            with lane.connect() as conn:
                s = Session(conn, lane)
                s.send_json({"op": "status", "root": lane.root})
                for kind, data in s.frames(timeout=30):
                    if kind == b"R":
                        ans = json.loads(data)
                        row.update(answers=True, free_gb=ans.get("free_gb"), copies=ans.get("copies", []),
                                   running=ans.get("running", []), guest=ans.get("guest"))
                        break
        except NevError as e:
            row["error"] = mask(str(e))
        row["seconds"] = round(time.monotonic() - t0, 2)
        rows.append(row)
    return rows
