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

from lanes.base import procs


def boot_id() -> str:
    """This machine's boot as the processes here see it: the kernel's boot id and the start time of
    PID 1, so an LXC guest started again (same kernel, a new init) is a new boot too. A process
    group recorded in another boot is gone, and its id may now name an unrelated group."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8", errors="replace") as f:
            kernel = f.read().strip()
    except OSError:
        kernel = ""
    init = procs.stat(1)
    return f"{kernel}:{init.start if init is not None else ''}"


def alive(pgid: int) -> bool:
    """A live process is in group `pgid`; zombies do not count (they wait for a reaper, not for us)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            s = procs.stat(int(entry.name))
            if s is not None and s.pgrp == pgid and s.state != "Z":
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
