"""`nev rig services apply | here | once | run`: the inventory's services on the lane itself.

The development box's side (`rig/services.py`) builds each lane's plan and sends it; this module
is what the lane's own nev does with it: `apply` writes the plan and its files under
`~/.config/nev/services`, puts the `@reboot` crontab line in and (re)starts the supervisor;
`here` is the lane's view of them (what `nev rig services status` shows); `once` runs one
service's command once; `Supervisor` (`nev rig services run`) keeps every planned service
running, restarting one that exits (1 s, doubling to 60 s), and holds
`~/.local/state/nev/services/supervisor.lock` while it runs.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lanes.agent.layout import lock_held
from lanes.base import crontab, jsonfile, procs, settings
from lanes.base.errors import ConfigError, NevError
from rig.services import (
    BACKOFF_MAX_S,
    CONFIG,
    STATE,
    STOP_GRACE_S,
    TAG,
    Here,
    Plan,
    Service,
    ServiceRow,
)


def lane_home(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("HOME") or Path.home())


def config_dir(home: Path) -> Path:
    return home / CONFIG


def state_dir(home: Path) -> Path:
    return home / STATE


def _nev_argv() -> list[str]:
    """How this nev runs itself again: the install it runs from (pinned: NEV_INSTALL puts it first
    on PATH), else this checkout's Python."""
    return ["nev"] if _install() else [sys.executable, "-m", "rig.cli"]


def _install() -> str | None:
    return settings.get(settings.INSTALL)


def cron_line(home: Path) -> str:
    log = state_dir(home) / "supervisor.log"
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": str(home)}
    return crontab.line(
        "@reboot", home, env, [str(home / ".local/bin/nev"), "rig", "services", "run"], log, TAG
    )


def _read(path: Path) -> object:
    """A file nev wrote here (the plan, a state record) as JSON; None when missing or unreadable."""
    try:
        return jsonfile.load(path, "nev's services file", "")
    except ConfigError:
        return None


def _record(home: Path) -> dict[str, object]:
    """The supervisor's record as it wrote it: `pid`, `start`, `install`."""
    data = _read(state_dir(home) / "supervisor.json")
    return data if isinstance(data, dict) else {}


def _planned(home: Path) -> list[Service]:
    """The services `apply` planned here (services.json); an entry that is not one is skipped."""
    data = _read(config_dir(home) / "services.json")
    svcs = data.get("services") if isinstance(data, dict) else None
    return [s for s in map(Service.of, svcs if isinstance(svcs, list) else []) if s is not None]


def _whole(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass
class ServiceState:
    """A service's state file (`<name>.json` in the state folder), written by the supervisor:
    its process (PID and kernel start time), when it started, how often it restarted and how it
    last exited. A file that is not one reads as no state, as before."""

    pid: int | None = None
    start: int | None = None
    started_at: float | None = None
    restarts: int = -1          # the first start makes it 0
    last_exit: int | None = None

    @classmethod
    def read(cls, path: Path) -> ServiceState:
        got = _read(path)
        if not isinstance(got, dict):
            return cls(restarts=0)
        at = got.get("started_at")
        return cls(_whole(got.get("pid")), _whole(got.get("start")),
                   float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None,
                   _whole(got.get("restarts")) or 0, _whole(got.get("last_exit")))

    def to_json(self) -> dict[str, object]:
        return {
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "pid": self.pid,
            "start": self.start,
            "started_at": self.started_at,
        }


def supervisor_pid(home: Path) -> int | None:
    """The running supervisor's PID (its lock is held and its record names a live process)."""
    if not lock_held(state_dir(home) / "supervisor.lock"):
        return None
    rec = _record(home)
    pid, start = rec.get("pid"), rec.get("start")
    if isinstance(pid, int) and procs.start_time(pid) == start:
        return pid
    return None


def stop_supervisor(home: Path, timeout: float = 20.0) -> bool:
    """SIGTERM the supervisor (it stops its services first); True when one ran."""
    pid = supervisor_pid(home)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while lock_held(state_dir(home) / "supervisor.lock") and time.monotonic() < deadline:
        time.sleep(0.1)
    if lock_held(state_dir(home) / "supervisor.lock"):
        os.kill(pid, signal.SIGKILL)
    return True


def start_supervisor(home: Path) -> None:
    """The supervisor in a session of its own (it outlives the SSH session that started it)."""
    sd = state_dir(home)
    sd.mkdir(parents=True, exist_ok=True)
    with open(sd / "supervisor.log", "ab") as log:
        subprocess.Popen(
            [*_nev_argv(), "rig", "services", "run"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=home,
        )
    deadline = time.monotonic() + 15
    while supervisor_pid(home) is None:
        if time.monotonic() > deadline:
            tail = (sd / "supervisor.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise NevError(
                "the services' supervisor did not start; its log says: "
                f"{' | '.join(tail) or '(nothing)'}"
            )
        time.sleep(0.1)


def apply(plan: Plan | None, home: Path) -> list[str]:
    """Make this host run `plan` (None: nothing); `changed:`/`unchanged:` lines."""
    cd, sd = config_dir(home), state_dir(home)
    out: list[str] = []
    if plan is None:
        if stop_supervisor(home):
            out.append("changed: supervisor stopped")
        if crontab.install(TAG, None):
            out.append("changed: @reboot line removed")
        for p in sorted(cd.glob("*")) if cd.is_dir() else []:
            p.unlink()
            out.append(f"changed: removed {p.name}")
        return out or ["unchanged: no services here"]
    cd.mkdir(parents=True, exist_ok=True)
    os.chmod(cd, 0o700)
    sd.mkdir(parents=True, exist_ok=True)
    changed = False
    for name, text in plan.files.items():
        p = cd / name
        if not p.exists() or p.read_text() != text:
            jsonfile.write_bytes_atomic(p, text.encode(), 0o600 if name in plan.secret else 0o644)
            changed = True
            out.append(f"changed: {name}")
    services = {"lane": plan.lane, "services": [s.to_json() for s in plan.services]}
    sp = cd / "services.json"
    if _read(sp) != services:
        jsonfile.write_atomic(sp, services)
        changed = True
        out.append("changed: services " + ", ".join(s.name for s in plan.services))
    for name in plan.keep:
        if not (cd / name).exists():
            raise ConfigError(f"{cd / name} is to be kept but is missing; run `nev rig services "
                              "install` again (it sends a new one)")
    for old in sorted(cd.glob("*")):
        if old.name not in plan.files and old.name not in plan.keep and old.name != "services.json":
            old.unlink()
            out.append(f"changed: removed {old.name}")
    if crontab.install(TAG, cron_line(home)):
        out.append("changed: @reboot line installed")
    running = supervisor_pid(home) is not None
    if running and (changed or _record(home).get("install") != _install()):
        stop_supervisor(home)
        running = False
    if not running:
        start_supervisor(home)
        out.append("changed: supervisor started")
    return (
        out
        if any(x.startswith("changed:") for x in out)
        else ["unchanged: services running as planned"]
    )


def _expand(value: str, home: Path) -> str:
    return value.replace("{config}", str(config_dir(home)))


def here(home: Path) -> Here:
    """This host's services as it sees them: the supervisor and each service's last state."""
    sd = state_dir(home)
    sup = supervisor_pid(home)
    rows = []
    now = time.time()
    for s in _planned(home):
        st = ServiceState.read(sd / f"{s.name}.json")
        alive = sup is not None and st.pid is not None and procs.start_time(st.pid) == st.start
        started = st.started_at if st.started_at is not None else now
        rows.append(
            ServiceRow(
                s.name,
                "running" if alive else ("restarting" if sup else "stopped"),
                st.pid if alive else None,
                round(now - started, 1) if alive else None,
                st.restarts,
                st.last_exit,
            )
        )
    key = config_dir(home) / "probe.key"
    try:   # the digest of the probe's key (never the key): `install` keeps it when the gateway does
        key_sha = hashlib.sha256(key.read_text().strip().encode()).hexdigest()
    except OSError:
        key_sha = None
    return Here(socket.gethostname(), sup, TAG in crontab.read(), rows, key_sha)


def once(home: Path, name: str) -> int:
    """One round of a planned service now, with its planned environment (`--rounds 1`), beside
    the running one: what an operator (or a test) runs to refresh the snapshot at once."""
    svc = next((s for s in _planned(home) if s.name == name), None)
    if svc is None:
        names = ", ".join(s.name for s in _planned(home)) or "none"
        raise ConfigError(f"no service {name!r} planned here (planned: {names}); "
                          "run `nev rig services install` from the development box")
    if name == "advertise":
        raise ConfigError("advertise has no rounds: it serves until stopped")
    env = {**os.environ, **{k: _expand(v, home) for k, v in svc.env.items()}}
    args = [_expand(a, home) for a in svc.args] + ["--rounds", "1"]
    return subprocess.run([*_nev_argv(), *args], env=env, cwd=home).returncode


class Supervisor:
    """`nev rig services run`: every planned service as a child, restarted when it exits."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.sd = state_dir(home)
        self.stopping = False
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.state: dict[str, ServiceState] = {}
        self.due: dict[str, float] = {}

    def _write(self, name: str) -> None:
        jsonfile.write_atomic(self.sd / f"{name}.json", self.state[name].to_json())

    def _start(self, s: Service) -> None:
        name = s.name
        env = {**os.environ, **{k: _expand(v, self.home) for k, v in s.env.items()}}
        args = [_expand(a, self.home) for a in s.args]
        with open(self.sd / f"{name}.log", "ab") as log:
            log.write(
                f"-- {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ} start: "
                f"nev {' '.join(args)}\n".encode()
            )
            log.flush()
            p = subprocess.Popen(
                [*_nev_argv(), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.home,
                start_new_session=True,
            )
        self.children[name] = p
        st = self.state.setdefault(name, ServiceState())
        st.pid, st.start, st.started_at = p.pid, procs.start_time(p.pid), time.time()
        st.restarts += 1
        self._write(name)

    def run(self) -> int:
        self.sd.mkdir(parents=True, exist_ok=True)
        lock = os.open(self.sd / "supervisor.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print("nev: the services' supervisor already runs here", file=sys.stderr)
            return 0
        planned = _planned(self.home)
        if not planned:
            print(
                f"nev: no services planned here ({config_dir(self.home) / 'services.json'}); run "
                "`nev rig services install` from the development box",
                file=sys.stderr,
            )
            return 1
        jsonfile.write_atomic(
            self.sd / "supervisor.json",
            {
                "pid": os.getpid(),
                "start": procs.start_time(os.getpid()),
                "install": _install(),
            },
        )
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._stop)
        backoff: dict[str, float] = {}
        print(
            f"supervisor {os.getpid()}: {', '.join(s.name for s in planned)}",
            file=sys.stderr,
            flush=True,
        )
        while not self.stopping:
            now = time.monotonic()
            for s in planned:
                name = s.name
                p = self.children.get(name)
                if p is not None and p.poll() is not None:
                    self.state[name].last_exit = p.returncode
                    self._write(name)
                    del self.children[name]
                    up = time.time() - (self.state[name].started_at or time.time())
                    backoff[name] = (
                        1.0
                        if up > BACKOFF_MAX_S
                        else min(BACKOFF_MAX_S, 2 * backoff.get(name, 0.5))
                    )
                    self.due[name] = now + backoff[name]
                    print(
                        f"{name} exited ({p.returncode}); again in {backoff[name]:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                if name not in self.children and now >= self.due.get(name, 0):
                    self._start(s)
            time.sleep(0.5)
        for p in self.children.values():
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in self.children.values():
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p.pid, signal.SIGKILL)
                p.wait()
        print(f"supervisor {os.getpid()}: stopped", file=sys.stderr, flush=True)
        return 0

    def _stop(self, signum: int, _frame: object) -> None:
        self.stopping = True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        pass
