"""`nev rig forward up|down|status`: start, stop and check the supervised forwards; the @reboot line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lanes import selfinstall
from lanes.base import crontab, openssh, procs, settings, sshfail
from lanes.base.errors import ConfigError, NevError, UsageError
from lanes.base.exitcodes import Exit
from rig import rigfile
from rig.forward import check
from rig.forward import state as st
from rig.forward.supervise import client_files, jump_target
from rig.rigfile import Forward, RigFile

NEV_ROOT = Path(__file__).resolve().parents[2]
UP_TIMEOUT = 30.0
CRON_TAG = "# nev-rig-forward"

Say = Callable[[str], None]


def load(path: Path) -> RigFile:
    """The rig file, refused in one line when it is missing or declares no forwards."""
    example = '"forwards": {"forge": {"local_port": 18080, "target": "10.0.0.5:80", "check": "forge"}}'
    if not path.exists():
        raise ConfigError(f"{path}: rig file not found (NEV_RIG_FILE); create it with \"jump\": "
                          f"\"[user@]host[:port]\" and {example} (see rig/rig.example.json, docs/forwards.md)")
    rig = rigfile.load(path)
    if not rig.forwards:
        raise ConfigError(f"{path}: no forwards declared; add {example} (docs/forwards.md)")
    return rig


def select(rig: RigFile, names: tuple[str, ...] | list[str]) -> list[Forward]:
    unknown = [n for n in names if n not in rig.forwards]
    if unknown:
        raise UsageError(f"no forward {unknown[0]!r} in {rig.path} (forwards: {', '.join(rig.forwards)})")
    return [rig.forwards[n] for n in (names or rig.forwards)]


def label(fw: Forward) -> str:
    return f"{fw.name} {fw.local} -> {fw.target}"


def supervisor_env(rig_path: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """What a supervisor (and the @reboot line) runs with: no secrets, every path absolute."""
    env = crontab.carried_env(environ)
    env["NEV_RIG_FILE"] = str(rig_path.absolute())
    for s in (settings.STATE_DIR, settings.KNOWN_HOSTS, settings.SSH_KEY):
        p = settings.get_path(s, environ)
        if p is not None:
            env[s.name] = str(p.absolute())
    env.update(selfinstall.pythonpath())
    return env


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ssh binds it
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _same(rec: st.State, fw: Forward, jump: str) -> bool:
    return (rec.local_port, rec.target, rec.check, rec.jump) == (fw.local_port, fw.target, fw.check, jump)


def _running(name: str) -> st.State | None:
    rec = st.read(st.Paths.of(name))
    return rec if rec is not None and rec.supervisor.alive() else None


def _spawn(rig: RigFile, name: str) -> st.Proc:
    p = st.Paths.of(name)
    p.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(p.log, "ab") as log:
        child = subprocess.Popen([sys.executable, "-m", "rig.cli", "rig", "forward", "supervise", name],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                                 env=supervisor_env(rig.path, os.environ), start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rec = st.read(p)
        if rec is not None and rec.supervisor.pid == child.pid:
            return rec.supervisor
        if child.poll() is not None:
            break
        time.sleep(0.02)
    last = " | ".join(st.tail(p.log, 2)) or "no log"
    raise NevError(f"{name}: its supervisor did not start ({last}); log {p.log}")


def _ssh_lines(name: str) -> str:
    p = st.Paths.of(name)
    said = [ln.split(" ssh: ", 1)[1] for ln in st.tail(p.log, 50) if " ssh: " in ln][-2:]
    return (f"; ssh said: {' | '.join(said)}" if said else "") + f" (log {p.log})"


SUPERVISE = ("forward", "supervise")


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def is_supervisor_argv(argv: list[str], name: str) -> bool:
    """Whether a command line is `nev rig forward supervise NAME` (`python -m rig.cli ...` too) (pure)."""
    return any(argv[i:i + 3] == [*SUPERVISE, name] for i in range(len(argv)))


def supervisors(name: str) -> list[st.Proc]:
    """Every running supervisor of forward `name` of this rig file, found in /proc by its command
    line and its environment's state folder, whatever its state and lock files say (damaged,
    gone): `down` stops what runs, not what a file records."""
    mine, out = st.folder(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = d.joinpath("cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if not is_supervisor_argv(argv, name):
            continue
        env = _environ(int(d.name))
        if env is None or st.folder(env) != mine:
            continue
        proc = st.Proc.of(int(d.name))
        if proc is not None:
            out.append(proc)
    return out


def _children(pid: int) -> list[st.Proc]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            s = procs.stat(int(d.name))
            if s is not None and s.ppid == pid:
                proc = st.Proc.of(int(d.name))
                if proc is not None:
                    out.append(proc)
    return out


def stop(name: str) -> str | None:
    """Stop a forward's supervisors and clients, drop its state. The supervisors are the one its
    state file records (PID and start time) and any other `supervisors` finds (the state file
    damaged or gone). What was stopped, or None when nothing ran."""
    p = st.Paths.of(name)
    try:
        rec = st.read(p)
    except ConfigError:
        rec = None
    sups = set(supervisors(name))
    clients: set[st.Proc] = set()
    if rec is not None:
        if rec.supervisor.alive():
            sups.add(rec.supervisor)
        clients |= {c for c in (rec.ssh,) if c is not None and c.alive()}
    for s in sups:
        clients |= set(_children(s.pid))
    stopped = []
    for s in sorted(sups, key=lambda x: x.pid):
        if procs.stop(s.rec()):
            stopped.append(f"supervisor {s.pid}")
    try:
        after = st.read(p)
    except ConfigError:
        after = None
    if after is not None and after.ssh is not None and after.ssh.alive():
        clients.add(after.ssh)
    for c in sorted(clients, key=lambda x: x.pid):
        procs.stop(c.rec(), grace=2.0)  # gone already when its supervisor stopped it
        stopped.append(f"ssh {c.pid}")
    for f in (p.state, p.lock):
        f.unlink(missing_ok=True)
    return ", ".join(stopped) if stopped else None


def up(rig: RigFile, names: tuple[str, ...], timeout: float, say: Say, warn: Say) -> int:
    fws = select(rig, names)
    jump = jump_target(rig)
    _check_client(rig)
    already, start = _to_start(fws, str(jump))
    for fw in start:
        if not port_free(fw.local_port):
            raise NevError(f"port {fw.local_port} on 127.0.0.1 is in use by another program "
                           f"(forwards.{fw.name}.local_port in {rig.path}); stop it or choose another port")
    t0 = time.monotonic()
    for fw in start:
        _spawn(rig, fw.name)
    failed = _wait_up(fws, start, already, t0, timeout, say, warn)
    if failed:
        raise NevError(f"{len(failed)} of {len(fws)} forwards did not come up: {', '.join(failed)}",
                       Exit.UNAVAILABLE)
    return 0


def _check_client(rig: RigFile) -> None:
    """The OpenSSH client, the known_hosts file and the key file (when one is named) are there."""
    if shutil.which("ssh") is None:
        raise ConfigError("no ssh client on PATH; install OpenSSH's client (Debian package openssh-client)")
    kh, key = client_files(rig)
    problem = sshfail.local_problem(key, kh)
    if problem is not None:
        raise sshfail.error(sshfail.Failure(problem[0], str(jump_target(rig)), True, problem[1]))


def _to_start(fws: list[Forward], jump: str) -> tuple[dict[str, str], list[Forward]]:
    """Forwards already running as declared (name -> note), and those to start: not running, or
    running with another declaration (stopped here)."""
    already: dict[str, str] = {}
    start: list[Forward] = []
    for fw in fws:
        rec = _running(fw.name)
        if rec is not None and _same(rec, fw, jump):
            already[fw.name] = f"already running since {rec.started}"
            continue
        if rec is not None:
            stop(fw.name)
            already[fw.name] = "restarted: its declaration changed"
        start.append(fw)
    return already, start


def _wait_up(fws: list[Forward], started: list[Forward], already: dict[str, str], t0: float, timeout: float,
             say: Say, warn: Say) -> dict[str, str]:
    """Until every forward answers a real request or is down for good; why each down one is."""
    pending = {fw.name: fw for fw in fws}
    failed: dict[str, str] = {}
    while pending:
        for name, fw in list(pending.items()):
            ans = check.probe(fw.check, fw.local_port)
            if ans.up:
                say(f"{label(fw)} up ({already.get(name) or f'{time.monotonic() - t0:.1f} s'})")
                del pending[name]
                continue
            why = _down_for_good(fw, ans.detail, fw in started, time.monotonic() - t0 > timeout, timeout)
            if why is not None:
                failed[name] = why
                del pending[name]
                warn(f"{label(fw)} DOWN: {why}{_ssh_lines(name)}")
        if pending:
            time.sleep(0.2)
    return failed


def _down_for_good(fw: Forward, detail: str, started_here: bool, timed_out: bool, timeout: float) -> str | None:
    """Why a forward that does not answer yet is down for good (None: keep waiting). One started
    by this call whose ssh failed in a way retrying cannot mend is stopped."""
    rec = st.read(st.Paths.of(fw.name))
    if rec is None or not rec.supervisor.alive():
        last = st.tail(st.Paths.of(fw.name).log, 1)
        return "its supervisor exited" + (f": {last[0]}" if last else "")
    if rec.ssh is None and rec.last_exit is not None and rec.last_exit.kind in openssh.LASTING:
        if started_here:
            stop(fw.name)
        return rec.last_exit.why
    if timed_out:
        why = rec.last_exit.why if rec.last_exit else detail
        if started_here:        # a failed `up` leaves nothing running behind it
            stop(fw.name)
            return f"not up after {timeout:.0f} s ({why}); stopped"
        return (f"not up after {timeout:.0f} s ({why}); its supervisor keeps retrying "
                "(`nev rig forward down` stops it)")
    return None


def down(names: tuple[str, ...], say: Say) -> int:
    todo = list(names) or st.recorded()
    if not todo:
        say(f"no forwards recorded in {st.folder()}; nothing to stop")
    for name in todo:
        what = stop(name)
        say(f"{name}: stopped ({what})" if what else f"{name}: was not running")
    return 0


@dataclass(frozen=True)
class Row:
    name: str
    local: str
    target: str
    check: str
    up: bool
    answer: str
    since: str | None
    restarts: int | None
    supervisor: int | None
    ssh: int | None
    last_exit: str | None
    log: str | None

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__, state="up" if self.up else "down")


def status(rig: RigFile, names: tuple[str, ...]) -> list[Row]:
    """Each forward checked with a real request, beside what its supervisor recorded."""
    rows = []
    for fw in select(rig, names):
        try:
            rec = _running(fw.name)
        except ConfigError:
            rec = None
        ans = check.probe(fw.check, fw.local_port)
        ssh_alive = rec is not None and rec.ssh is not None and rec.ssh.alive()
        if ans.up and not (ssh_alive and rec is not None and rec.ssh is not None
                           and check.held_by(rec.ssh.pid, fw.local_port)):
            # an answer on the port, but not through nev's client: another program holds it
            ans = check.Answer(False, f"another program listens on {fw.local}, not nev's forward; "
                                      "stop it or choose another local_port")
        rows.append(Row(fw.name, fw.local, fw.target, fw.check, ans.up, ans.detail,
                        rec.since if rec and ssh_alive else None, rec.restarts if rec else None,
                        rec.supervisor.pid if rec else None,
                        rec.ssh.pid if rec and rec.ssh and ssh_alive else None,
                        rec.last_exit.why if rec and rec.last_exit else None, rec.log if rec else None))
    return rows


def render(rows: list[Row]) -> str:
    out = []
    for r in rows:
        held = (f"since {r.since}, {r.restarts} restart{'' if r.restarts == 1 else 's'}"
                if r.since else "client restarting" if r.supervisor else "no supervisor")
        if r.up and r.supervisor is None:
            held = "not held by nev (another program answers on this port)"
        last = f"; last exit: {r.last_exit}" if r.last_exit and not r.up else ""
        out.append(f"{r.name:<10} {r.local:<16} -> {r.target:<22} {'up' if r.up else 'DOWN':<5} "
                   f"{r.answer}; {held}{last}")
    return "\n".join(out)


def cron_tag(rig_path: Path) -> str:
    return f"{CRON_TAG} {rig_path.absolute()}"


def cron_line(rig_path: Path, environ: Mapping[str, str]) -> str:
    env = supervisor_env(rig_path, environ)
    log = settings.path(settings.STATE_DIR, env) / "forwards" / "boot.log"
    return crontab.line("@reboot", NEV_ROOT, env, [sys.executable, "-m", "rig.cli", "rig", "forward", "up"],
                        log, cron_tag(rig_path))


def install(rig_path: Path, on: bool, say: Say) -> None:
    """Add (or remove) the @reboot line that runs `nev rig forward up` with this rig file."""
    if on:
        st.folder().mkdir(mode=0o700, parents=True, exist_ok=True)
    changed = crontab.install(cron_tag(rig_path), cron_line(rig_path, os.environ) if on else None)
    if on:
        say(("installed" if changed else "already installed:") + f" the @reboot crontab line for {rig_path}")
    else:
        say(("removed" if changed else "no @reboot crontab line to remove") + f" for {rig_path}")
