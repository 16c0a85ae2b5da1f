"""One forward's supervisor: keeps its OpenSSH client running, records state, stops on SIGTERM.

It runs detached (its own session), holds `<name>.lock` for its lifetime, and restarts the
client whenever it exits. The wait before a restart (`next_delay`, pure):

| the client ran | next wait |
|---|---|
| less than STABLE s | twice the last wait: FIRST at first, at most MAX |
| STABLE s or longer | FIRST again |

SIGTERM (or SIGINT) stops the client, records the stop and exits 0. The client gets
SIGTERM by itself if the supervisor dies any other way (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import FrameType

from lanes.base import notify, openssh, settings, ssh
from lanes.base.errors import NevError
from lanes.base.mask import mask_argv
from rig.forward import state as st
from rig.rigfile import Forward, RigFile

FIRST = 0.5
MAX = 5.0
STABLE = 10.0


def next_delay(last: float, ran: float) -> float:
    """Seconds to wait before the next client, after one that ran `ran` s (pure; see the table)."""
    if ran >= STABLE or last <= 0:
        return FIRST
    return min(last * 2, MAX)


def client_files(rig: RigFile) -> tuple[Path, Path | None]:
    """(known_hosts, the jump host's key file): the rig file's own (the jump's `hosts` entry, else
    its `ssh_key`), else NEV_KNOWN_HOSTS and NEV_SSH_KEY."""
    kh = rig.known_hosts or ssh.default_known_hosts()
    key = (rig.key_for(rig.jump) if rig.jump else rig.ssh_key) or ssh.default_key_file()
    return kh.absolute(), key.absolute() if key is not None else None


def jump_target(rig: RigFile) -> ssh.Target:
    if not rig.jump:
        raise NevError(f"{rig.path}: no jump host; add \"jump\": \"[user@]host[:port]\"")
    return ssh.Target.parse(rig.jump, default_user="root")


class Supervisor:
    def __init__(self, rig: RigFile, fw: Forward) -> None:
        self.rig_path = rig.path
        self.fw = fw
        self.paths = st.Paths.of(fw.name)
        self.jump = jump_target(rig)
        self.known_hosts, self.key = client_files(rig)
        self.log = st.Log(self.paths.log, owns_std=True)
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None
        self.failing_since: float | None = None   # clients failing (none up STABLE s) since

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()

    def run(self) -> int:
        self.paths.dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.paths.lock, "w")  # noqa: SIM115 - held until the process exits
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.log.write(f"supervisor: {self.fw.name} already has a supervisor; this one exits")
            return 1
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        me = st.Proc.of(os.getpid())
        assert me is not None
        self.state = st.State(name=self.fw.name, local_port=self.fw.local_port, target=self.fw.target,
                              jump=str(self.jump), check=self.fw.check, supervisor=me, started=st.now(),
                              log=str(self.paths.log))
        st.write(self.paths, self.state)
        argv = openssh.client_forward_argv(self.jump, self.fw.local_port, self.fw.target, self.known_hosts,
                                       self.key)
        self.log.write(f"supervisor {me.pid}: holding {self.fw.local} -> {self.fw.target} via {self.jump}")
        delay = 0.0
        while not self.stopping:
            ran = self._one_client(argv)
            if self.stopping:
                break
            gone = self._undeclared()
            if gone:
                # Nobody will stop it any more (a rig-in-a-box folder removed, a forward dropped
                # from the file): a supervisor of nothing stops by itself instead of retrying forever.
                self.log.write(f"supervisor: {gone}; stopping")
                self.state.ssh = None
                self.state.since = None
                self.state.last_exit = st.Exit(at=st.now(), code=None, kind="stopped", why=gone)
                st.write(self.paths, self.state)
                return 0
            delay = next_delay(delay, ran)
            self.log.write(f"restarting the client in {delay:.1f} s")
            self._sleep(delay)
            self.state.restarts += 1
        self.state.ssh = None
        self.state.since = None
        self.state.last_exit = st.Exit(at=st.now(), code=None, kind="stopped", why="stopped (SIGTERM)")
        st.write(self.paths, self.state)
        self.log.write("supervisor: stopped")
        return 0

    def _undeclared(self) -> str | None:
        """Why this forward is no longer declared (its rig file gone or changed), or None."""
        from rig import rigfile

        if not self.rig_path.exists():
            return f"the rig file {self.rig_path} is gone"
        try:
            fws = rigfile.load(self.rig_path).forwards
        except NevError:
            return None          # a file being edited: keep the forward until it reads again
        now = fws.get(self.fw.name)
        if now is None:
            return f"{self.fw.name} is no longer declared in {self.rig_path}"
        if (now.local_port, now.target) != (self.fw.local_port, self.fw.target):
            return f"{self.fw.name} is declared differently in {self.rig_path} now (`up` starts it anew)"
        return None

    def _one_client(self, argv: list[str]) -> float:
        """Run one client until it exits; record it. Seconds it ran."""
        t0 = time.monotonic()
        child = openssh.start_client_forward(argv)
        self.child = child
        if self.stopping:  # SIGTERM came between the start and the line above
            child.terminate()
        proc = st.Proc.of(child.pid)
        self.state.ssh = proc
        self.state.since = st.now()
        st.write(self.paths, self.state)
        self.log.write(f"client {child.pid} started: {mask_argv(argv)}")
        stable = threading.Timer(STABLE, self._stable)
        stable.daemon = True
        stable.start()
        said: list[str] = []
        assert child.stderr is not None
        for raw in child.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line:
                said = (said + [line])[-20:]
                self.log.write(f"ssh: {line}")
        code = child.wait()
        stable.cancel()
        self.child = None
        ran = time.monotonic() - t0
        fail = openssh.client_failure("\n".join(said), self.jump, self.known_hosts)
        why = fail.line if said else f"ssh exited {code} without a message"
        if code < 0:
            why = f"killed by signal {-code}" + (f"; {fail.line}" if said else "")
        self.state.ssh = None
        self.state.last_exit = st.Exit(at=st.now(), code=code, kind=fail.kind if said else "other", why=why)
        st.write(self.paths, self.state)
        self.log.write(f"client {child.pid} exited {code} after {ran:.1f} s: {why}")
        if not self.stopping:
            self._failing(ran, why)
        return ran

    def _failing(self, ran: float, why: str) -> None:
        """A client exited: the webhook hears when none stayed up for NEV_NOTIFY_FORWARD_DOWN_S."""
        if ran >= STABLE:
            self.failing_since = None
        if self.failing_since is None:
            self.failing_since = time.time()
        down_for = time.time() - self.failing_since
        if down_for >= settings.get_float(settings.NOTIFY_FORWARD_DOWN_S):
            notify.down(notify.Kind.FORWARD_DOWN, self.fw.name,
                        f"{self.fw.local} -> {self.fw.target} via {self.jump}: no client up for "
                        f"{down_for:.0f} s ({self.state.restarts} restarts); the last: {why}",
                        self.failing_since)

    def _stable(self) -> None:
        """A client has stayed up STABLE s: the forward is up (a recovery, if the webhook heard)."""
        self.failing_since = None
        notify.up(notify.Kind.FORWARD_DOWN, self.fw.name,
                  f"{self.fw.local} -> {self.fw.target} up again")

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

