"""The lane end of a gate (`lanes/gate.py` is the development box's): one conversation, lock to result.

In order: take the copy's lock (a second gate of the same worktree waits and says so); answer
HELLO; take the payload; supply the commit to the mirror (`lanes.agent.mirror`); prepare the copy
(`lanes.agent.copy`); run the command in its own session with NEV_ON_LANE=1, its output to the
development box and the gate log (`lanes.agent.output`); pull the asked folders back; remove the
three `.env` files on every exit unless the request keeps them; the RESULT last.

After HELLO a `writer-start` request instead of the payload starts a writer (`start_writer`,
`lanes.agent.writer`): the copy synced the same way, refused over a dead writer's unfetched
commits, the harness checkout updated fast-forward only, then the harness started detached, the
copy's `.env` kept for its lifetime (`Leave`), and watched for the settle time (one that ends in
it is a failed start, its log's last lines in the RESULT).
A gate of a copy whose writer runs is refused.
"""

from __future__ import annotations

import fcntl
import os
import queue
import resource
import shutil
import subprocess
import sys
import threading
import time
from enum import Enum

from lanes.agent import layout, links, writer
from lanes.agent.copy import Copy, lane_model_url, remove_env
from lanes.agent.errors import Refused, Stopped
from lanes.agent.guard import inside, pull_path
from lanes.agent.messages import (
    Bundle,
    GateResult,
    Hello,
    HelloAnswer,
    NeedBundle,
    Payload,
    PullStart,
    StopRun,
    WriterStart,
    send,
)
from lanes.agent.mirror import Mirror
from lanes.agent.output import Masker, Tee, env_secrets, open_log
from lanes.agent.procs import Child, on_signals
from lanes.agent.root import copy_sizes, free_gb
from lanes.agent.storeserve import StoreService
from lanes.agent.wire import FrameWriter, Kind, ProtocolError, Stop, Wire
from lanes.agent.wiretypes import read_request

#: the uid a gate run as root runs as inside its jail (`Gate.jailed`)
GATE_UID = 1000


class Leave(Enum):
    """What a gate removes as it ends."""

    ALL = "all"            # the three `.env` files and the payload folder
    NOTHING = "nothing"    # the request kept them (NEV_LANE_KEEP_ENV)
    WRITERS = "writers"    # all but the copy's `.env`: a running writer's (it removes its own)


class Gate:
    def __init__(self, wire: Wire, hello: Hello) -> None:
        self.wire = wire
        self.name = hello.name
        if not layout.copy_name_ok(self.name):
            raise Refused(f"worktree name {self.name!r} cannot be a lane copy's name")
        self.root = layout.Root(hello.root)
        self.shared = hello.shared
        self.min_free_gb = hello.min_free_gb
        self.child = Child(self.root.copy(self.name))
        self.copy = Copy(self.root, self.name, wire.say)
        self.mirror = Mirror(self.root, hello.git_url, None, hello.fetch_max_age, wire.say,
                             self.child)
        self.lock_fd: int | None = None
        self.bundles: queue.Queue[int] = queue.Queue()
        self.leave = Leave.ALL
        self.store: StoreService | None = None

    def lock(self) -> None:
        """The copy's lock, waiting (and saying so) while another gate of the same worktree holds it."""
        os.makedirs(self.root.path, exist_ok=True)
        fd = os.open(self.root.lock(self.name), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            except OSError:
                holder = "unknown"
            self.wire.say(f"another gate of {self.name} is running on this lane ({holder}); waiting for it to finish")
            t0 = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.wire.say(f"the other gate of {self.name} finished after {time.monotonic() - t0:.1f} s; going on")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}\n".encode(), 0)
        self.lock_fd = fd

    def hello(self) -> HelloAnswer:
        have_mirror = os.path.isdir(self.mirror.path)
        free = free_gb(self.root.path)
        return HelloAnswer(
            pid=os.getpid(), mirror=have_mirror, tips=self.mirror.tips() if have_mirror else [],
            fetch_age=self.mirror.fetch_age() if have_mirror else None, free_gb=round(free, 2),
            guest=os.uname().nodename, python=sys.version.split()[0],
            copies=copy_sizes(self.root.path) if free < self.min_free_gb else None,
            root=os.path.realpath(self.root.path), home=os.path.realpath(os.path.expanduser("~")),
            shared=os.path.realpath(self.shared) if os.path.isdir(self.shared) else None,
            bwrap=shutil.which("bwrap"),
            harness=os.path.realpath(writer.harness_home(dict(os.environ))))

    def jailed(self, command: list[str], jail: list[str]) -> list[str]:
        """`command` in the gate's own jail (`jail`: bubblewrap's options, made on the development
        box): its scratch folder (`<payload>/tmp`) and the share's entries the jail binds for it
        to write (`lanes.agent.links.gate_writes`: a ledger file, folders) made first, so the jail
        can bind them. Refused on a lane without bubblewrap."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise Refused("bubblewrap is not installed on this lane and every gate runs in a jail "
                          "of its own (docs/sandbox.md; nev lane provision names what is "
                          "missing); nothing ran")
        tmp = os.path.join(self.root.payload(self.name), "tmp")
        os.makedirs(tmp, mode=0o700, exist_ok=True)
        shared = os.path.realpath(self.shared) + "/"
        for i, opt in enumerate(jail[:-1]):
            p = jail[i + 1]
            if opt == "--bind-try" and p.startswith(shared) and os.path.isdir(self.shared):
                if not inside(self.shared, os.path.dirname(p)) or os.path.lexists(p):
                    continue
                if p.endswith(".jsonl"):
                    os.makedirs(os.path.dirname(p), exist_ok=True)
                    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                    os.close(os.open(p, flags, 0o644))
                else:
                    os.makedirs(p, exist_ok=True)
        # a gate run as root (a lane whose user is root, a test's local lane) runs as an ordinary
        # uid in its jail: root without capabilities in a user namespace breaks programs that
        # check for root (Firefox's content processes die), and the gate needs no root
        if os.getuid() == 0:
            jail = ["--uid", str(GATE_UID), "--gid", str(GATE_UID), *jail]
        return [bwrap, *jail, "--", *command]

    def take_payload(self, announced: dict[str, int]) -> dict[str, int]:
        """The members that follow the payload request, into the payload folder; their sizes."""
        sizes = {m: announced.get(m, 0) for m in layout.PAYLOAD_MEMBERS}
        folder = self.root.payload(self.name)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        for member, size in sizes.items():
            if member == layout.ENV and size == 0:
                continue
            self.wire.copy_to(self.root.member(self.name, member), size)
        return sizes

    def ask_bundle(self, tips: list[str]) -> int:
        """NEED_BUNDLE with the mirror's tips; the size of the bundle that comes back."""
        send(self.wire, Kind.NEED_BUNDLE, NeedBundle(tips))
        while True:
            self.child.check()
            try:
                return self.bundles.get(timeout=0.2)
            except queue.Empty:
                continue

    def watch_stdin(self) -> None:
        """After the payload: a stop request or a closed connection stops the run; a bundle is taken."""
        how = Stop.TERM
        while True:
            try:
                req = read_request(self.wire)
            except (EOFError, OSError, ProtocolError):
                break
            if isinstance(req, StopRun):
                how = req.signal
                break
            if isinstance(req, Bundle):
                try:
                    self.wire.copy_to(self.root.member(self.name, layout.BUNDLE), req.size)
                except (EOFError, OSError):
                    break
                self.bundles.put(req.size)
        self.child.stop(how)

    def command_env(self, extra: dict[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(extra)
        env.update({"NEV_ON_LANE": "1", "NEV_LANE_SHARED": self.shared})
        # Non-login SSH commands read no profile: put the lane's own nev (installed by
        # `nev lane install`) on PATH the way a login shell would.
        local_bin = layout.home_file(os.path.expanduser("~"), layout.LOCAL_BIN)
        if os.path.isdir(local_bin) and local_bin not in env.get("PATH", "").split(os.pathsep):
            env["PATH"] = local_bin + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        if os.path.isdir(self.shared):
            env.setdefault("NEV_LEDGER", os.path.join(self.shared, links.ledger_path(self.name)))
        return env

    def run_command(self, command: list[str], env: dict[str, str], log_path: str | None,
                    masker: Masker, jail: list[str] | None = None) -> int:
        if jail:
            prog = command[0]
            found = (os.path.join(self.copy.path, prog) if "/" in prog
                     else shutil.which(prog, path=env.get("PATH")))
            if found is None or not os.path.exists(found):
                self.wire.send(Kind.STDERR, f"nev-lane: command not found: {prog}\n".encode())
                return 127
            if os.path.isdir(found) or not os.access(found, os.X_OK):
                self.wire.send(Kind.STDERR, f"nev-lane: command not executable: {prog}\n".encode())
                return 126
            command = self.jailed(command, jail)
            if os.path.isdir(self.shared):
                # the store is read-only in the jail: nev's builder serves the gate from outside
                self.store = StoreService(self.root.store_service(self.name),
                                          os.path.expanduser("~"), env)
                try:
                    self.store.open()
                except OSError as e:
                    self.wire.say(f"nev's store builder cannot listen for this gate ({e}); "
                                  "what it builds stays in its copy")
        try:
            p = self.child.start(command, cwd=self.copy.path, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError:
            self.wire.send(Kind.STDERR, f"nev-lane: command not found: {command[0]}\n".encode())
            return 127
        except PermissionError:
            self.wire.send(Kind.STDERR, f"nev-lane: command not executable: {command[0]}\n".encode())
            return 126
        assert p.stdout is not None and p.stderr is not None
        tee = Tee(self.wire, open_log(log_path, self.wire.say), masker)
        tee.start(p.stdout, p.stderr)  # type: ignore[arg-type]
        status = p.wait()
        tee.finish()
        self.child.done()
        self.close_store()
        return 128 - status if status < 0 else status

    def close_store(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def pull(self, dirs: list[str]) -> None:
        """Each folder back as PULL_START, its gzip'd tar in PULL_DATA frames, PULL_END."""
        for asked in dirs:
            try:
                d = pull_path(asked)
            except Refused as e:
                self.wire.say(f"{e}; nothing pulled for it")
                continue
            src = os.path.join(self.copy.path, d)
            if os.path.islink(src) or not os.path.isdir(src) or not inside(self.copy.path, src):
                self.wire.say(f"--pull {d}: no such folder in the lane copy; nothing pulled for it")
                continue
            sparse = sparse_file(src)
            if sparse is not None:
                self.wire.say(f"--pull {d}: {sparse} is a sparse file (it would become its whole "
                              "size of real disk); nothing pulled for it")
                continue
            send(self.wire, Kind.PULL_START, PullStart(d))
            out = FrameWriter(self.wire, Kind.PULL_DATA)
            import tarfile  # only with --pull: a call starts without it

            with tarfile.open(fileobj=out, mode="w|gz", format=tarfile.PAX_FORMAT) as tf:
                tf.add(src, arcname=".")
            out.flush_all()
            self.wire.send(Kind.PULL_END)

    def take(self, announced: dict[str, int]) -> dict[str, int]:
        """The payload's members in, then the stop and bundle requests watched; their sizes."""
        sizes = self.take_payload(announced)
        threading.Thread(target=self.watch_stdin, daemon=True).start()
        return sizes

    def supply(self, commit: str, sizes: dict[str, int]) -> None:
        """The commit into the mirror (`lanes.agent.mirror`)."""
        self.mirror.supply(commit, f"refs/nev/{self.name}", self.root.member(self.name, layout.BUNDLE),
                           sizes[layout.BUNDLE] > 0, self.ask_bundle)
        self.child.check()

    def prepare(self, commit: str, sizes: dict[str, int]) -> None:
        """The copy at `commit` with the worktree's changes, its links and its `.env`."""
        self.copy.prepare(self.mirror, commit)
        self.copy.apply_diff(self.root.member(self.name, layout.DIFF))
        if sizes[layout.UNTRACKED]:
            self.copy.extract(self.root.member(self.name, layout.UNTRACKED))
        self.copy.make_links(self.shared)
        self.copy.install_env(lane_model_url())

    def finish(self, result: GateResult) -> None:
        """Remove what `leave` says, the RESULT last, the lock let go."""
        self.close_store()
        if self.leave is not Leave.NOTHING:
            remove_env(self.root, self.name, keep_copy_env=self.leave is Leave.WRITERS)
            shutil.rmtree(self.root.payload(self.name), ignore_errors=True)
        result.env_removed = not any(os.path.lexists(p) for p in self.root.env_files(self.name))
        result.maxrss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result.command_maxrss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss or None
        send(self.wire, Kind.RESULT, result)
        if self.lock_fd is not None:
            os.close(self.lock_fd)


def sparse_file(folder: str) -> str | None:
    """The first file under `folder` (links not followed) with fewer blocks on disk than its size
    needs, relative to it; None when there is none."""
    for top, _dirs, files in os.walk(folder):
        for f in files:
            p = os.path.join(top, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if (st.st_mode & 0o170000) == 0o100000 and st.st_blocks * 512 + 65536 < st.st_size:
                return os.path.relpath(p, folder)
    return None


def run(wire: Wire, hello: Hello) -> int:
    """A whole gate from its `hello` request; the exit status of the agent (the command's)."""
    gate = Gate(wire, hello)
    result = GateResult()

    def on_stop(how: Stop) -> None:
        if gate.lock_fd is None:  # still waiting for another gate's lock: nothing to undo
            os._exit(how.status)
        gate.child.stop(how)

    on_signals(on_stop)
    try:
        gate.lock()
        gate.leave = Leave.WRITERS    # refused over a running writer: its `.env` stays
        writer.refuse_if_running(gate.root, gate.name)
        gate.leave = Leave.ALL
        send(wire, Kind.HELLO, gate.hello())
        req = read_request(wire)
        if isinstance(req, Payload):
            return run_payload(gate, req, result)
        if isinstance(req, WriterStart):
            return start_writer(gate, req, result)
        result.aborted = True
        return 0
    except Stopped:
        result.stopped = gate.child.how
        return gate.child.how.status
    except Refused as e:
        result.refused = str(e)
        return 1
    except EOFError:
        result.refused = "the connection closed before the payload arrived"
        return 1
    finally:
        gate.finish(result)


def run_payload(gate: Gate, req: Payload, result: GateResult) -> int:
    """The payload's command in the prepared copy, its output streamed and logged; the asked
    folders pulled back. The command's exit status."""
    if req.keep_env:
        gate.leave = Leave.NOTHING
    gate.mirror.cred = req.cred
    sizes = gate.take(req.sizes)
    t0 = time.monotonic()
    gate.supply(req.commit, sizes)
    gate.prepare(req.commit, sizes)
    result.prepare_s = round(time.monotonic() - t0, 3)
    gate.child.check()
    secrets = env_secrets(gate.root.member(gate.name, layout.ENV))
    if req.cred is not None and req.cred.password:
        secrets.append(req.cred.password)
    log_path = None
    if os.path.isdir(gate.shared):
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        log_path = os.path.join(gate.shared, links.gate_log_path(gate.name, stamp, os.uname().nodename,
                                                                 req.commit))
        result.log = log_path
    status = gate.run_command(req.command, gate.command_env(req.env), log_path, Masker(secrets),
                              req.jail)
    if gate.child.stopping.is_set():
        result.stopped = gate.child.how
    result.status = status
    if not gate.child.stopping.is_set():
        gate.pull(req.pull)
    return status


def start_writer(gate: Gate, req: WriterStart, result: GateResult) -> int:
    """A writer started in the prepared copy (refused over the last writer's unfetched commits, or
    when the harness checkout cannot be updated fast-forward), detached: the copy's `.env` stays
    while it runs. A writer that ends within `settle_s` is a failed start (`writer_ended`)."""
    gate.mirror.cred = req.cred
    sizes = gate.take(req.sizes)
    t0 = time.monotonic()
    gate.supply(req.commit, sizes)
    writer.refuse_unfetched(gate.root, gate.name, req.commit)
    env = gate.command_env(req.env)
    result.harness = writer.update_harness(writer.harness_home(env))
    gate.prepare(req.commit, sizes)
    result.prepare_s = round(time.monotonic() - t0, 3)
    gate.child.check()
    result.writer = writer.launch(gate.root, gate.name, req.writer, req.commit, env,
                                  [req.cred.password if req.cred else ""], req.jail)
    gate.leave = Leave.WRITERS
    if not writer.settle(result.writer, req.settle_s):
        result.writer_ended = writer.ended_at_once(gate.root, gate.name, result.writer)
        result.status = 1
        return 1
    result.status = 0
    return 0
