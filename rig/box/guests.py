"""Where the box's LXC guests live and which process is a guest's init right now.

A lane guest boots its own init (systemd): a reboot inside it (or `lxc-stop -r`) starts a new
init under the same LXC monitor, so a recorded PID goes stale while the lane is up. Whatever
enters a guest (nsenter, tc) asks here for the current init instead of trusting the record.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from lanes import create


def base(box_dir: Path) -> Path:
    """The box's folder in the LXC cache: its lxcpath and the staged binds."""
    return Path(create.cache()) / "boxes" / box_dir.name


def lxcpath(box_dir: Path) -> str:
    return str(base(box_dir) / "lxc")


def container(box_dir: Path, lane_name: str) -> str:
    return f"{box_dir.name}-{lane_name}"


def init_pid(box_dir: Path, lane_name: str) -> int | None:
    """The guest's init as this machine sees it, or None when the guest is not running."""
    try:
        cp = subprocess.run(["lxc-info", "-P", lxcpath(box_dir), "-n", container(box_dir, lane_name), "-pH"],
                            capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = cp.stdout.strip()
    return int(out) if cp.returncode == 0 and out.isdigit() else None
