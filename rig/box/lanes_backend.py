"""The seam between the box and its lanes: what a lane backend does, and what both backends share.

The box calls, per lane: `prepare` (files, keys; returns the host key to pin), `start` (when
the recorded process is not alive), `wait` (until SSH answers), and on removal `remove`. There
are "netns" (a network namespace running sshd in a private mount namespace) and "lxc" (a real
unprivileged LXC guest, `rig/box/lanes_lxc.py`, the default); NEV_BOX_LANES picks one
(`rig/box/lanes_kinds.py`). Both are `BoxLanes`:
a lane's folder, its home with the client key, and the wait for its SSH are the same for both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from lanes.base.procs import ProcRec
from rig.box import netns, plan, waits
from rig.box.state import LaneInfo


class LaneBackend(Protocol):
    kind: str
    uses_netns: bool   # False: the lane is not a namespace of the box (an LXC guest has its own)

    def prepare(self, lane: LaneInfo, host: plan.Host, client_pub: str) -> str:
        """Write the lane's files (keys, configs); return its host public key line."""

    def start(self, lane: LaneInfo, host: plan.Host, rec: ProcRec | None) -> ProcRec | None:
        """Start the lane if `rec` is not alive; return the new record (None when unchanged)."""

    def wait(self, lane: LaneInfo, rec: ProcRec) -> None:
        """Wait until the lane accepts SSH."""

    def remove(self, lane_dir: Path) -> None:
        """Remove what `prepare` made outside the box folder (nothing, for netns)."""


class BoxLanes:
    """What both backends share: the box's folders, a lane's own folder and home, the wait for SSH."""

    def __init__(self, box_dir: Path, log_dir: Path) -> None:
        self.box_dir = box_dir
        self.log_dir = log_dir

    def lane_dir(self, lane: LaneInfo) -> Path:
        return self.box_dir / "lanes" / lane.name

    def make_home(self, lane: LaneInfo, uid: int, gid: int, client_pub: str) -> None:
        """The lane's root and home on this machine, owned by its `lane` user, the client key authorized."""
        for p in (lane.host_root, lane.host_home, lane.host_home / ".ssh"):
            p.mkdir(parents=True, exist_ok=True)
            os.chown(p, uid, gid)
        os.chmod(lane.host_home / ".ssh", 0o700)
        ak = lane.host_home / ".ssh" / "authorized_keys"
        ak.write_text(client_pub + "\n")
        os.chown(ak, uid, gid)
        os.chmod(ak, 0o600)

    def wait_ssh(self, lane: LaneInfo, rec: ProcRec, timeout: float, log: Path) -> None:
        with netns.inside(f"{self.box_dir.name}-rig"):   # the rig network: no route from the dev box
            waits.wait_port(lane.addr, plan.SSH_PORT, timeout, rec, log)
