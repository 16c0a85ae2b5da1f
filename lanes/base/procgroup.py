"""Stopping a process group on this machine: SIGTERM the group, wait, SIGKILL what is left.

The one way code on the development box (or a job's runner on a lane) ends a group it started with
`start_new_session=True`: a job's stage, a browser with its driver, the demo's dashboard. The lane
agent (`lanes/agent/procs.py`) keeps its own: it is standard-library only and shipped alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


def boot_id() -> str:
    """This machine's boot as the processes here see it: the kernel's boot id and the start time of
    PID 1, so an LXC guest started again (same kernel, a new init) is a new boot too. A process
    group recorded in another boot is gone, and its id may now name an unrelated group."""
    parts = []
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/1/stat"):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read().strip()
        except OSError:
            text = ""
        if path.endswith("stat"):
            fields = text.rsplit(")", 1)[-1].split()
            text = fields[19] if len(fields) > 19 else ""   # starttime: field 22 of stat
        parts.append(text)
    return ":".join(parts)


def alive(pgid: int) -> bool:
    """A live process is in group `pgid`; zombies do not count (they wait for a reaper, not for us)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def stop(pgid: int, grace: float = 5.0, kill_wait: float = 2.0,
         leader: subprocess.Popen | None = None) -> None:
    """SIGTERM group `pgid`, wait up to `grace` seconds for it to end, then SIGKILL what is left and
    wait up to `kill_wait` seconds. `leader`, the group's first process when it is our child, is
    reaped while waiting. A group that is gone (or not ours to signal) is left alone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, kill_wait)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if leader is not None:
                leader.poll()
            if not alive(pgid):
                _reap(leader)
                return
            time.sleep(0.05)


def _reap(leader: subprocess.Popen | None) -> None:
    """The group is gone; its leader may still be a zombie that `alive` does not count: reap it."""
    if leader is not None:
        try:
            leader.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
