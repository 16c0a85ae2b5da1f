"""nev's versioned installs in the lane user's home, for the sweep: plain facts, and removal.

`facts` lists every entry of `~/.local/share/nev/installs/` (an install, one being built, one
being removed) and the venv of the time before versioned installs, each with whether it is the
current one and which processes run from it (a process whose working folder, open files, among
them the `.in-use` lock every nev run holds, or command line lie in it). Which go is decided on
the development box (`lanes.sweep.decide_installs`). `remove` takes each named install's lock
exclusively (a nev starting from it meanwhile is refused), checks again that it is not current and
no process runs from it, renames it to `.gone-<name>.<pid>` (so nothing finds it by its name any
more) and only then deletes it. Nothing outside the installs folder and the old venv is touched.
Stdlib only.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat

from lanes.agent import layout
from lanes.agent.errors import Refused
from lanes.agent.messages import InstallFacts

Procs = list[tuple[int, str, list[str]]]  # (pid, name, paths it works in): `root._processes`
LEGACY = "venv"


def _with_cmdlines(procs: Procs) -> Procs:
    """`procs` with each process's command line among its paths (read once per survey)."""
    out = []
    for pid, comm, paths in procs:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            args = []
        out.append((pid, comm, paths + args))
    return out


def users(path: str, procs: Procs) -> list[tuple[int, str]]:
    """The processes that run from `path`: their cwd, an open file or an argument lies in it."""
    pre = path.rstrip("/") + "/"
    out = set()
    for pid, comm, paths in procs:
        if pid != os.getpid() and any(q == path or q.startswith(pre) for q in paths):
            out.add((pid, comm))
    return sorted(out)


def _real_dir(p: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(p).st_mode)
    except OSError:
        return False


def _current(home: str) -> str | None:
    """The folder `current` leads to (realpath), or the venv the lane's `nev` leads into when
    there is no `current` yet (a lane installed before versioned installs)."""
    cur = os.path.join(home, layout.NEV_CURRENT)
    if os.path.islink(cur):
        return os.path.realpath(cur)
    link = os.path.join(home, layout.LOCAL_BIN, "nev")
    legacy = os.path.realpath(os.path.join(home, layout.NEV_LEGACY_VENV))
    if os.path.realpath(link).startswith(legacy + "/"):
        return legacy
    return None


def _path(home: str, name: str) -> str:
    if name == LEGACY:
        return os.path.join(home, layout.NEV_LEGACY_VENV)
    return os.path.join(home, layout.NEV_INSTALLS, name)


def kind(name: str) -> str | None:
    """An entry of the installs folder by its name: install, tmp, gone, legacy; None: not ours."""
    if name == LEGACY:
        return "legacy"
    if layout.install_name_ok(name):
        return "install"
    for k, prefix in (("tmp", layout.INSTALL_TMP), ("gone", layout.INSTALL_GONE)):
        if name.startswith(prefix) and "/" not in name and name not in (prefix, ".", ".."):
            return k
    return None


def facts(home: str, procs: Procs) -> list[InstallFacts]:
    """One record per install entry: name, kind, current, pids ([pid, name]), chosen (when it was
    last made current, else its folder's time), building (an install holds the install lock)."""
    base = os.path.join(home, layout.NEV_INSTALLS)
    try:
        names = sorted(os.listdir(base))
    except OSError:
        names = []
    if _real_dir(_path(home, LEGACY)):
        names.append(LEGACY)
    current, procs = _current(home), _with_cmdlines(procs)
    building = layout.lock_held(os.path.join(home, layout.INSTALL_LOCK))
    out = []
    for name in names:
        k, path = kind(name), _path(home, name)
        if k is None or not _real_dir(path):
            continue
        try:
            chosen = os.lstat(os.path.join(path, layout.CHOSEN)).st_mtime
        except OSError:
            chosen = os.lstat(path).st_mtime
        out.append(InstallFacts(name=name, kind=k, current=os.path.realpath(path) == current,
                                pids=tuple(users(path, procs)), chosen=chosen, building=building))
    return out


def remove_one(home: str, name: str, procs: Procs) -> None:
    """Remove the install `name`; Refused (kept) when it is current, in use or not an install."""
    k = kind(name)
    path = _path(home, name)
    if k is None or not _real_dir(path):
        raise Refused(f"{name!r} is no install of nev here; kept")
    if os.path.realpath(path) == _current(home):
        raise Refused("the current install; kept")
    fd = os.open(os.path.join(path, layout.IN_USE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise Refused("a nev runs from it (its in-use lock is held); kept") from None
        use = users(path, _with_cmdlines(procs))
        if use:
            raise Refused(f"in use by {', '.join(f'{c} ({p})' for p, c in use)}; kept")
        gone = os.path.join(home, layout.NEV_INSTALLS, f"{layout.INSTALL_GONE}{name}.{os.getpid()}")
        if k == "gone":
            gone = path
        else:
            os.makedirs(os.path.dirname(gone), exist_ok=True)
            os.rename(path, gone)
    finally:
        os.close(fd)
    shutil.rmtree(gone)


def remove(home: str, names: list[str], procs: Procs) -> tuple[list[str], dict[str, str]]:
    """`remove_one` of each name: (removed, {name: why kept}). One sweep at a time removes
    (`layout.SWEEP_LOCK`): the lane's development boxes sweep when they like, and two that chose
    the same old install would race over its rename and deletion. An install gone by the time
    this sweep holds the lock was removed by another's: removed, not failed."""
    removed, failed = [], {}
    lock = os.path.join(home, layout.SWEEP_LOCK)
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for name in names:
            if kind(name) is not None and not os.path.lexists(_path(home, name)):
                removed.append(name)
                continue
            try:
                remove_one(home, name, procs)
                removed.append(name)
            except (Refused, OSError) as e:
                failed[name] = str(e)
    finally:
        os.close(fd)
    return removed, failed
