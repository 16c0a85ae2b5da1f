"""The dev-box side of a gate: pick a lane, ship the worktree, stream the run, pull, clean up.

`run()` is `nev lane run` (lane-only unless told otherwise) and `on()` is `nev lane on`. One SSH
channel carries the whole conversation with the lane agent (`lanes/agent/`): hello (the
mirror's tips, free disk), the payload, the streamed output, pulled folders and the result.
`run()` opens it with the OpenSSH client (`lanes.base.openssh.OpenSsh`): it starts without paramiko,
and a lane that does not answer is the client exiting before the agent said a word. An
interrupt (SIGINT/SIGTERM) asks the lane to stop the command's whole process tree and exits
130/143; a dropped connection is followed by a second SSH call that stops the run and removes
the three `.env` files.
"""

from __future__ import annotations

import os
import posixpath
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lanes import lanesfile, payload, session
from lanes.agent.errors import Refused
from lanes.agent.guard import check_rel
from lanes.agent.messages import (
    Abort,
    Bundle,
    CleanupRequest,
    CleanupResult,
    Cred,
    GateResult,
    Hello,
    HelloAnswer,
    NeedBundle,
    Payload,
    PullStart,
    StatusRequest,
    StatusResult,
    StopRun,
    WriterSpec,
    WriterStart,
)
from lanes.agent.wire import Kind, Stop
from lanes.base import notify, settings, ui
from lanes.base.errors import ConfigError, DiskShortError, NevError, NoLaneError
from lanes.base.exitcodes import Exit, passed_through
from lanes.base.gitrun import Repo
from lanes.base.mask import mask
from lanes.base.openssh import OpenSsh
from lanes.base.ssh import CONNECT_TIMEOUT, Connection, SshError, link_errors
from lanes.base.sshfail import Unreachable  # the lane never answered: nothing was sent there
from lanes.forge import Forge, forge_for
from lanes.lanesfile import Lane, LanesFile
from lanes.pulled import Pull, pull_dirs, pull_problem
from lanes.session import Session


def _sweep(lane: Lane, track: str, repo: Repo) -> None:
    """The disk guard's sweep, when the lane root is short of NEV_LANE_MIN_FREE_GB before a run:
    by the tracks of `repo`, the repository being gated; the guard then asks the lane again."""
    from lanes import sweep

    sweep.gate_hook(lane, track, repo)

STOP_WAIT = 3.0
DROPPED_EXIT = Exit.CONNECTION_DROPPED


class Interrupted(NevError):
    """SIGINT/SIGTERM on the dev box during a gate; the lane's command was stopped too."""


class _Term(BaseException):
    pass


def pick_lane(lf: LanesFile, index: int | None,
              timeout: float = CONNECT_TIMEOUT) -> tuple[Lane, Connection] | None:
    """The first lane (or lane `index`) that accepts a key login within `timeout`."""
    for lane in lanesfile.pick(lf, index):
        conn = lane.connection(timeout)
        try:
            conn.connect()
        except SshError as e:
            ui.info(f"{lane.label} ({lane.ssh}) does not answer: {e}")
            continue
        return lane, conn
    return None


@dataclass
class Outcome:
    status: int
    result: GateResult
    bytes_sent: int                 # over the gate's channel: the agent when asked, requests, payload
    payload_sizes: dict[str, int]
    agent_sent: bool = False        # the lane lacked this agent (or its cached copy did not match)


def _hello_request(session: Session, wt: payload.Worktree, forge: Forge) -> Hello:
    return Hello(name=wt.name, root=session.lane.root, shared=session.lane.shared_dir,
                 git_url=forge.lane_url,
                 fetch_max_age=settings.get_float(settings.LANE_FETCH_MAX_AGE),
                 min_free_gb=settings.get_float(settings.LANE_MIN_FREE_GB))


def _hello(session: Session, wt: payload.Worktree, forge: Forge, sent: bool = False) -> HelloAnswer:
    """The lane's HELLO (the request sent first unless `sent`)."""
    if not sent:
        session.request(_hello_request(session, wt, forge))
    for kind, data in session.frames():
        if kind is Kind.MESSAGE:
            ui.info(f"{session.lane.label}: {data.decode(errors='replace')}")
        elif kind is Kind.HELLO:
            return session.decode(data, HelloAnswer.decode)
        elif kind is Kind.RESULT:
            res = session.decode(data, GateResult.decode)   # a refusal reads as one too
            raise NevError(f"{session.lane.label}: {res.refused or 'the lane agent stopped'}")
    why = session.unreachable()
    if why is not None:
        raise why if isinstance(why, Unreachable) else Unreachable(str(why))
    raise SshError(f"{session.lane.label}: the lane agent ended before answering (is python3 installed there?)")


def disk_short_message(lane: Lane, hello: HelloAnswer, need: float) -> str:
    copies = hello.copies or []
    largest = ", ".join(f"{c.name} ({c.kb / (1 << 20):.1f} GiB)" for c in copies[:3]) or "no copies"
    return (f"lane {lane.index} has {hello.free_gb:.1f} GiB free under {lane.root} even after a sweep "
            f"(needs {need:g} GiB, NEV_LANE_MIN_FREE_GB); largest copies: {largest}; nothing ran")


def _interrupt_handlers() -> Callable[[], None]:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_term(signum: int, frame: object) -> None:
        raise _Term()

    old = signal.signal(signal.SIGTERM, on_term)

    def restore() -> None:
        signal.signal(signal.SIGTERM, old)
    return restore


def gate_jail(hello: HelloAnswer | None, name: str, ledger: str | None = None) -> list[str]:
    """bubblewrap's options for the gate's own jail on the lane that said `hello`, made by the one
    sandbox (`lanes.base.gatejail.gate_jail_args`) from the paths that lane resolved; `ledger`:
    the ledger its requester named (NEV_LEDGER_NAME), the one it may write."""
    from lanes.agent import layout, links
    from lanes.base import gatejail

    if hello is None or not hello.root or not hello.home:
        raise NevError("the lane's hello named no root or home to build the gate's jail from; "
                       "nothing ran")
    root = layout.Root(hello.root)
    view = gatejail.GateView(root=root.path, name=name, copy=root.copy(name), mirror=root.mirror,
                            tmp=posixpath.join(root.payload(name), "tmp"), home=hello.home,
                            shared=hello.shared, share_writes=links.gate_writes(name, ledger),
                            store_socket=posixpath.join(root.store_service(name),
                                                        layout.STORE_SOCKET)
                            if hello.shared else None)
    return gatejail.gate_jail_args(view)


def writer_jail(hello: HelloAnswer | None, name: str, env: Mapping[str, str]) -> list[str]:
    """bubblewrap's options for a writer's harness on the lane that said `hello`, made by the one
    builder (`lanes.base.gatejail.writer_jail_args`): it reads its harness checkout (the start's
    PI_TRACKS_HOME, else the lane's) and its own briefs folder."""
    from lanes.agent import layout, writer
    from lanes.base import gatejail

    if hello is None or not hello.root or not hello.home:
        raise NevError("the lane's hello named no root or home to build the writer's jail from; "
                       "nothing started")
    root = layout.Root(hello.root)
    harness = env.get("PI_TRACKS_HOME") or hello.harness
    reads = tuple(r for r in (harness, writer.brief_folder(hello.home, name)) if r)
    return gatejail.writer_jail_args(gatejail.WriterView(
        root=root.path, copy=root.copy(name), mirror=root.mirror, home=hello.home,
        shared=hello.shared, reads=reads))


class _GateRun:
    """One gate's conversation with the lane agent, and what its interrupt and drop paths need:
    the session (a second one after a sweep), the lane's hello and what the payload weighed."""

    def __init__(self, lane: Lane, conn: Connection | OpenSsh, wt: payload.Worktree, forge: Forge) -> None:
        self.lane, self.conn, self.wt, self.forge = lane, conn, wt, forge
        self.session: Session | None = None
        self.first: Session | None = None
        self.hello: HelloAnswer | None = None
        self.sizes: dict[str, int] = {}
        self.local: payload.Local | None = None
        self.pull: list[str] = []
        self.pull_refused: list[str] = []     # one line per pulled folder refused (nothing of it written)

    def open(self, min_free: float, sweep: Callable[[Lane, str], object] | None,
             files: Mapping[str, bytes] | None = None) -> Session:
        """A session on the lane with `min_free` GiB free: when short, the lane is swept and asked
        once more. The payload's members that do not depend on the lane are made while its hello
        is on the way."""
        try:
            self.session = self.first = Session(self.conn, self.lane)
        except Unreachable:          # no channel at all (no known_hosts or key file): nothing sent
            raise
        except SshError as e:
            raise Unreachable(str(e)) from None
        self.session.request(_hello_request(self.session, self.wt, self.forge))
        self.local = payload.local_members(self.wt, files, self.forge.lane_url is not None)
        try:
            self.hello = hello = _hello(self.session, self.wt, self.forge, sent=True)
        except Unreachable as e:
            if not (e.master_lost and isinstance(self.conn, OpenSsh)):
                raise
            # the kept connection died with its lane (nothing reached the agent): once more anew
            self.session.close()
            self.conn.drop_kept()
            self.session = self.first = Session(self.conn, self.lane)
            self.hello = hello = _hello(self.session, self.wt, self.forge)
        if hello.free_gb < min_free:
            self.session.request(Abort())
            self.session.close()
            ui.info(f"{self.lane.label}: {hello.free_gb:.1f} GiB free, under {min_free:g} GiB; "
                    "sweeping the lane")
            if sweep is not None:
                sweep(self.lane, self.wt.name)
            else:
                _sweep(self.lane, self.wt.name, self.wt.repo)
            self.session = Session(self.conn, self.lane)
            self.hello = hello = _hello(self.session, self.wt, self.forge)
            if hello.free_gb < min_free:
                self.session.request(Abort())
                msg = disk_short_message(self.lane, hello, min_free)
                notify.down(notify.Kind.DISK_SHORT, self.lane.label, msg)
                raise DiskShortError(msg)
        notify.up(notify.Kind.DISK_SHORT, self.lane.label, f"{hello.free_gb:.1f} GiB free")
        return self.session

    def send(self, session: Session, command: Sequence[str], extra_env: dict[str, str] | None, keep_env: bool,
             pull: Sequence[str], files: Mapping[str, bytes] | None = None,
             writer: WriterSpec | None = None) -> None:
        """The payload request (or, with `writer`, the writer's start), its members after it."""
        tips = self.hello.tips if self.hello else []
        p = payload.build(self.wt, tips, self.forge.lane_url is not None, files, self.local)
        self.sizes = p.sizes()
        self.pull = list(pull)
        env, cred = dict(extra_env or {}), Cred.of(self.forge.lane_cred())
        if writer is not None:
            session.request(WriterStart(commit=p.commit, sizes=self.sizes, writer=writer, env=env,
                                        cred=cred, settle_s=writer_settle(),
                                        jail=writer_jail(self.hello, self.wt.name, env)))
        else:
            session.request(Payload(commit=p.commit, sizes=self.sizes, command=list(command),
                                    env=env, cred=cred, keep_env=keep_env, pull=list(pull),
                                    jail=gate_jail(self.hello, self.wt.name,
                                                   settings.get(settings.LEDGER_NAME, env))))
        for member in p.members():
            for chunk in payload.member_chunks(member):
                session.send(chunk)

    def stream(self, session: Session, out: Callable[[bytes], None],
               err: Callable[[bytes], None]) -> GateResult | None:
        """The run's frames until its result (None when the connection drops first)."""
        pulling: Pull | None = None
        for kind, data in session.frames():
            if kind is Kind.STDOUT:
                out(data)
            elif kind is Kind.STDERR:
                err(data)
            elif kind is Kind.MESSAGE:
                ui.info(f"{self.lane.label}: {data.decode(errors='replace')}")
            elif kind is Kind.NEED_BUNDLE:
                self.resend_bundle(session, session.decode(data, NeedBundle.decode).tips)
            elif kind is Kind.PULL_START:
                pulling = Pull(session.decode(data, PullStart.decode).dir, self.pull)
            elif kind is Kind.PULL_DATA and pulling is not None:
                pulling.write(data)
            elif kind is Kind.PULL_END and pulling is not None:
                why = pulling.finish(self.wt.path)
                if why is None:
                    ui.info(f"{self.lane.label}: pulled {pulling.dir}")
                else:
                    self.pull_refused.append(why)
                pulling = None
            elif kind is Kind.RESULT:
                return session.decode(data, GateResult.decode)
        return None

    def resend_bundle(self, session: Session, tips: list[str]) -> None:
        ui.info(f"{self.lane.label}: the forge could not supply the bundle's basis; sending a bundle over the lane's own commits")
        b = payload.bundle(self.wt.repo, self.wt.commit, payload.known_commits(self.wt.repo, tips))
        session.request(Bundle(size=len(b)))
        session.send(b)
        self.sizes["bundle_resent"] = len(b)

    def agent_sent(self) -> bool:
        return any(s is not None and s.agent_sent for s in (self.first, self.session))

    def sent(self) -> int:
        """Bytes sent over the gate's sessions (both, when a sweep made a second)."""
        total = self.session.sent if self.session else 0
        if self.first is not None and self.first is not self.session:
            total += self.first.sent
        return total


def gate_on_lane(lane: Lane, conn: Connection | OpenSsh, wt: payload.Worktree, command: Sequence[str], *,
                 forge: Forge, pull: Sequence[str] = (), extra_env: dict[str, str] | None = None,
                 sweep: Callable[[Lane, str], object] | None = None,
                 on_stdout: Callable[[bytes], None] | None = None,
                 on_stderr: Callable[[bytes], None] | None = None,
                 files: Mapping[str, bytes] | None = None,
                 writer: WriterSpec | None = None) -> Outcome:
    """Run `command` for `wt` on an answering lane; the exit status is the command's. `files`
    (lane-copy path -> content) travel with the untracked files: files of this machine the
    command needs, which the lane cannot read here. With `writer` (`lanes.writer.start`) the
    copy is synced the same way and a writer started there (`writer-start`) instead of
    `command`; the result's `writer` is its record."""
    keep_env = settings.get_flag(settings.LANE_KEEP_ENV)
    restore = _interrupt_handlers()
    run = _GateRun(lane, conn, wt, forge)
    result: GateResult | None = None
    try:
        session = run.open(settings.get_float(settings.LANE_MIN_FREE_GB), sweep, files)
        run.send(session, command, extra_env, keep_env, pull, files, writer)
        result = run.stream(session, on_stdout or _write(sys.stdout), on_stderr or _write(sys.stderr))
    except (KeyboardInterrupt, _Term) as e:
        how = Stop.INT if isinstance(e, KeyboardInterrupt) else Stop.TERM
        if not _stop(run.session, how):
            _second_call(lane, wt, run.hello.pid if run.hello else None, keep_env)
        raise Interrupted(f"interrupted; the command on {lane.label} was stopped", how.status) from None
    finally:
        restore()
        if run.session is not None:
            run.session.close()
    if result is None:
        cleanup = _second_call(lane, wt, run.hello.pid if run.hello else None, keep_env)
        raise NevError(f"the connection to {lane.label} dropped mid-run; {cleanup}", DROPPED_EXIT)
    if result.refused:
        what = "the writer's start" if writer is not None else "the gate"
        raise NevError(f"{lane.label} refused {what}: {result.refused}")
    if result.stopped:
        raise Interrupted(f"the command on {lane.label} was stopped", result.stopped.status)
    if run.pull_refused:
        raise NevError(f"{lane.label}: {'; '.join(run.pull_refused)}; the command exited {result.status}",
                       Exit.PULL_REFUSED)
    if result.status is None:
        raise NevError(f"{lane.label} ran nothing and gave no status (the gate was aborted)")
    return Outcome(result.status, result, run.sent(), run.sizes, run.agent_sent())


def writer_settle() -> float:
    """NEV_WRITER_SETTLE_S: how long the lane watches a new writer before it answers."""
    s = settings.get_float(settings.WRITER_SETTLE_S)
    if not 0 <= s <= 600:
        raise ConfigError(f"NEV_WRITER_SETTLE_S={s:g} is out of range; set seconds from 0 to 600 "
                          "(default 2)")
    return s


def _write(stream: Any) -> Callable[[bytes], None]:
    def w(data: bytes) -> None:
        stream.buffer.write(data)
        stream.buffer.flush()
    return w


def _stop(session: Session | None, how: Stop) -> bool:
    """Ask the lane to stop the command's process tree; True when it confirmed."""
    if session is None or session.ch.closed:
        return False
    failed: tuple[type[BaseException], ...] = (*link_errors(), NevError)
    try:
        session.request(StopRun(signal=how))
        for kind, _ in session.frames(timeout=STOP_WAIT):
            if kind is Kind.RESULT:
                return True
    except failed:
        return False
    return False


def _second_call(lane: Lane, wt: payload.Worktree, pid: int | None, keep_env: bool) -> str:
    """A fresh SSH connection that stops the run (if still there) and removes the .env files."""
    failed: tuple[type[BaseException], ...] = (NevError, *link_errors())
    try:
        with lane.openssh() as conn:
            res = session.call(conn, lane, CleanupRequest(root=lane.root, name=wt.name, pid=pid,
                                                          keep_env=keep_env), 15, CleanupResult)
    except failed as e:
        return f"the second SSH call to remove the .env files failed too ({mask(str(e))}); run it again with `nev lane run`"
    if res.busy:
        return "another gate of this worktree holds the lane copy; it removes its own .env"
    return "the lane copy's .env files were removed over a second SSH call"


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
        return passed_through(p.wait())
    except (KeyboardInterrupt, _Term) as e:
        sig = signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM
        p.send_signal(sig)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
        raise Interrupted("interrupted", Exit.INTERRUPTED if sig == signal.SIGINT else Exit.TERMINATED) from None
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
        sweep: Callable[[Lane, str], object] | None = None, files: Mapping[str, bytes] | None = None) -> int:
    """`nev lane run`: the command's exit status; NoLaneError (3) when no lane answers and lane-only.

    Already on a lane (NEV_ON_LANE set) it runs in place, as `nev lane on` does."""
    if not command:
        raise NevError("no command given; say what to run on the lane")
    if already_on_lane():
        return in_place(Path(worktree), command, pull, extra_env)
    pull = pull_dirs(pull)
    for name in files or {}:
        try:
            check_rel(name, "a file sent with the run")
        except Refused as e:
            raise NevError(str(e)) from None
    wt = payload.Worktree.open(Path(worktree))
    for d in pull:
        why = pull_problem(wt.path, d)
        if why:
            raise NevError(f"--pull {d} refused: {why}; nothing ran")
    lf = lanesfile.configured(require=lane_only)
    forge: Forge | None = None
    no_answer: list[str] = []
    for lane in lanesfile.pick(lf, lane_index) if lf.lanes else []:
        forge = forge or forge_for(wt.repo, lf)
        conn = lane.openssh()
        try:
            return passed_through(gate_on_lane(lane, conn, wt, command, forge=forge, pull=pull,
                                               extra_env=extra_env, sweep=sweep, files=files).status)
        except Unreachable as e:
            ui.info(f"{lane.label} ({lane.ssh}) does not answer: {e}")
            no_answer.append(f"{lane.label}: {e}")
        finally:
            conn.close()
    if lane_only:
        where = "NEV_LANE_SSH" if settings.get(settings.LANE_SSH) else lf.path
        last = f"; {no_answer[-1]}" if no_answer else ""
        raise NoLaneError(f"no build lane answered (lanes from {where}); nothing ran, here or "
                          f"there{last}")
    ui.info("no build lane answered; running on this machine")
    return run_local(wt.path, command, extra_env)


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
    lf = lanesfile.configured(require=False, strict=True)
    rows: list[dict[str, Any]] = []  # `nev lane list --json`'s rows: JSON documents to emit
    for lane in lf.lanes:
        row: dict[str, Any] = {"index": lane.index, "ssh": lane.ssh, "name": lane.name, "root": lane.root,
                               "answers": False, "free_gb": None, "copies": [], "running": []}
        t0 = time.monotonic()
        try:
            with lane.connect() as conn:
                ans = session.call(conn, lane, StatusRequest(root=lane.root), 30, StatusResult)
            row.update(answers=True, free_gb=ans.free_gb, copies=ans.copies, running=ans.running,
                       guest=ans.guest)
        except NevError as e:
            row["error"] = mask(str(e))
            if isinstance(e, Unreachable):
                row["cause"] = e.cause.value
        row["seconds"] = round(time.monotonic() - t0, 2)
        rows.append(row)
    return rows
