"""A forward's state file and log under NEV_STATE_DIR/forwards/<rig>/, written by its supervisor only.

`<name>.json` (written atomically): the declaration the supervisor runs, the supervisor's PID
and kernel start time (so a reused PID is never mistaken for ours), the current ssh client's
PID and start time, `since` (when that client started), `restarts`, and the last exit.
`<name>.log` is capped: past LOG_CAP bytes it moves to `<name>.log.1` (one old file kept).
`<name>.lock` is held (flock) by the running supervisor: a second one for the same name exits.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from lanes.base import jsonfile, procs, settings
from lanes.base.errors import ConfigError
from lanes.base.mask import mask
from lanes.base.procs import ProcRec

LOG_CAP = 256 * 1024


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def folder(environ: Mapping[str, str] | None = None) -> Path:
    """NEV_STATE_DIR/forwards/<rig file>-<digest of its absolute path>: the forwards of one rig
    file (several rigs, or rigs-in-a-box, on one development box never share a name). `environ`:
    another process's environment (a supervisor's), else this one's."""
    base = settings.path(settings.STATE_DIR, environ)
    rig = settings.path(settings.RIG_FILE, environ)
    where = str(rig.absolute())
    return base.absolute() / "forwards" / f"{rig.stem}-{hashlib.sha256(where.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Paths:
    name: str
    dir: Path

    @classmethod
    def of(cls, name: str) -> Paths:
        return cls(name, folder())

    @property
    def state(self) -> Path:
        return self.dir / f"{self.name}.json"

    @property
    def log(self) -> Path:
        return self.dir / f"{self.name}.log"

    @property
    def lock(self) -> Path:
        return self.dir / f"{self.name}.lock"


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # /proc/PID/stat field 22: clock ticks since boot

    def alive(self) -> bool:
        return procs.alive(self.rec())

    def rec(self) -> ProcRec:
        return ProcRec(key="forward", host="local", pid=self.pid, start=self.start, argv=[])

    @classmethod
    def of(cls, pid: int) -> Proc | None:
        st = procs.start_time(pid)
        return None if st is None else cls(pid, st)


@dataclass(frozen=True)
class Exit:
    at: str
    code: int | None  # the client's exit status; negative: killed by that signal
    kind: str         # host-key | login | port | other | stopped
    why: str


@dataclass
class State:
    name: str
    local_port: int
    target: str
    jump: str
    check: str
    supervisor: Proc
    started: str              # when the supervisor started
    log: str
    ssh: Proc | None = None   # the current client
    since: str | None = None  # when the current client started
    restarts: int = 0
    last_exit: Exit | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def write(p: Paths, st: State) -> None:
    jsonfile.write_atomic(p.state, st.to_json())


def read(p: Paths) -> State | None:
    """The recorded state, None when there is none; a damaged file is an error naming it."""
    if not p.state.exists():
        return None
    f = jsonfile.Fields(p.state)
    o = f.obj(jsonfile.load(p.state, "forward state file"), "(top level)")
    try:
        sup = f.obj(o.get("supervisor"), "supervisor")
        ssh = o.get("ssh")
        last = o.get("last_exit")
        return State(name=f.get(o, "name", str, ""), local_port=f.get(o, "local_port", int, ""),
                     target=f.get(o, "target", str, ""), jump=f.get(o, "jump", str, ""),
                     check=f.get(o, "check", str, ""), started=f.get(o, "started", str, ""),
                     log=f.get(o, "log", str, ""),
                     supervisor=Proc(int(sup["pid"]), int(sup["start"])),
                     ssh=Proc(int(ssh["pid"]), int(ssh["start"])) if ssh else None,
                     since=f.get(o, "since", str, "", required=False),
                     restarts=f.get(o, "restarts", int, ""),
                     last_exit=Exit(**last) if last else None)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{p.state}: damaged forward state ({e}); stop it with `nev rig forward down "
                          f"{p.name}`") from None


def recorded() -> list[str]:
    """Names of every forward with a state file."""
    d = folder()
    return sorted(q.stem for q in d.glob("*.json")) if d.is_dir() else []


class Log:
    """Timestamped, masked lines appended to `<name>.log`, moved aside past LOG_CAP bytes."""

    def __init__(self, path: Path, cap: int = LOG_CAP, owns_std: bool = False) -> None:
        self.path = path
        self.cap = cap
        self.owns_std = owns_std  # the supervisor: its stdout/stderr follow the log when it moves

    def write(self, line: str) -> None:
        try:
            if self.path.stat().st_size > self.cap:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                if self.owns_std:
                    self._redirect_std()
        except FileNotFoundError:
            pass
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{now()} {mask(line.rstrip())}\n")

    def _redirect_std(self) -> None:
        # The supervisor's own stdout/stderr point at the log too (a traceback lands there).
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
        finally:
            os.close(fd)


def tail(path: Path, n: int = 3) -> list[str]:
    """The last `n` lines of a log, masked ([] when there is none)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [mask(ln) for ln in lines[-n:]]
