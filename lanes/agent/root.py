"""One-call operations on the lane root: `status` (`nev lane list`) and `cleanup` (after a dropped gate)."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from typing import Any

from lanes.agent import layout
from lanes.agent.copy import remove_env
from lanes.agent.git import git
from lanes.agent.wire import need


def free_gb(path: str) -> float:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / 1e9


def copy_sizes(root: str) -> list[dict[str, Any]]:
    """Each copy's size in KB (`du -sk`), largest first: what the disk guard's refusal names."""
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not layout.copy_name_ok(name) or not os.path.isdir(path) or os.path.islink(path):
            continue
        cp = subprocess.run(["du", "-sk", path], capture_output=True)
        kb = int(cp.stdout.split()[0]) if cp.returncode == 0 and cp.stdout else 0
        out.append({"name": name, "kb": kb})
    return sorted(out, key=lambda c: -c["kb"])


def locked(path: str, shared: bool = False) -> bool:
    """Whether another process holds the flock of the lock file at `path` (a gate runs)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def status(req: dict[str, Any]) -> dict[str, Any]:
    """`nev lane list`: free disk, copies present (worktrees of the mirror), gates running (locks held)."""
    root = layout.Root(need(req, "root"))
    ans: dict[str, Any] = {"guest": socket.gethostname(), "root": root.path, "copies": [], "running": []}
    if not os.path.isdir(root.path):
        ans["free_gb"] = None
        return ans
    ans["free_gb"] = round(free_gb(root.path), 2)
    if os.path.isdir(root.mirror):
        mirror = os.path.realpath(root.mirror)
        ans["copies"] = sorted(os.path.basename(p) for p in _worktrees(root) if p != mirror)
    for entry in sorted(os.listdir(root.path)):
        name = layout.lock_owner(entry)
        if name is not None and locked(root.lock(name), shared=True):
            ans["running"].append(name)
    return ans


def _worktrees(root: layout.Root) -> set[str]:
    r = git(["worktree", "list", "--porcelain"], cwd=root.mirror, check=False)
    lines = r.stdout.decode(errors="surrogateescape").splitlines()
    return {os.path.realpath(ln[9:]) for ln in lines if ln.startswith("worktree ")}


def cleanup(req: dict[str, Any]) -> dict[str, Any]:
    """The development box's second call after a dropped connection: stop the run, remove the
    `.env` files. Only when no other gate holds the copy's lock (the one that does removes its own)."""
    root, name = layout.Root(need(req, "root")), need(req, "name")
    if req.get("pid"):
        try:
            os.kill(int(req["pid"]), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    ans: dict[str, Any] = {"removed": [], "busy": False}
    if not layout.copy_name_ok(name) or not os.path.exists(root.lock(name)):
        return ans
    fd = os.open(root.lock(name), os.O_RDWR)
    try:
        deadline = time.monotonic() + float(req.get("wait", 5))
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    ans["busy"] = True
                    return ans
                time.sleep(0.05)
        if not req.get("keep_env"):
            ans["removed"] = remove_env(root, name)
            shutil.rmtree(root.payload(name), ignore_errors=True)
        return ans
    finally:
        os.close(fd)
