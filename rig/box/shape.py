"""`nev box shape`: a token-bucket filter on a link, one direction per veth end.

For a lane: the bridge-side veth's egress (in the rig namespace) is what the lane downloads; the
lane's own eth0 egress is what it uploads. For `outside` (the development box's uplink to the
jump host, as on the real rig): the root namespace's end is what the development box uploads,
the jump host's eth1 what it downloads. tbf counts headers: set about 4.6% above a payload rate.
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

from lanes.base.errors import NevError, UsageError
from rig.box import plan

if TYPE_CHECKING:
    from rig.box.state import BoxInfo

OUTSIDE = "outside"   # the development box's link to the jump host


def shape_cmds(info: BoxInfo, lane: str, off: bool, up: int | None, down: int | None,
               guest_pid: int | None = None) -> list[list[str]]:
    """The tc command lines (pure, so the decision is testable). An LXC lane (`guest_pid`, its
    init) has no named namespace: its side is reached with nsenter."""
    if lane == OUTSIDE:
        # down: what reaches the development box (the jump host's eth1 egress); up: what leaves it.
        near: list[str] = []
        dev_near = f"{info.name}-out"
        inside = ["ip", "netns", "exec", f"{info.name}-jump"]
        dev_far = "eth1"
    else:
        h = info.hosts.get(lane)
        if h is None or h["role"] != "lane":
            names = [n for n, x in info.hosts.items() if x["role"] == "lane"]
            raise UsageError(f"{lane!r} is not a lane of box {info.name}; pick one of "
                             f"{', '.join(names)} or {OUTSIDE}")
        near = ["ip", "netns", "exec", info.rig_netns]
        dev_near = h["netns"]
        inside = ["nsenter", "-t", str(guest_pid), "-n", "--"] if guest_pid else ["ip", "netns", "exec", h["netns"]]
        dev_far = "eth0"
    if off:
        return [[*near, "tc", "qdisc", "del", "dev", dev_near, "root"],
                [*inside, "tc", "qdisc", "del", "dev", dev_far, "root"]]
    if up is None and down is None:
        raise UsageError("give --up KBIT and/or --down KBIT, or `off`")
    cmds = []
    for kbit, flag in ((up, "--up"), (down, "--down")):
        if kbit is not None and kbit < 8:
            raise UsageError(f"{flag} {kbit}: a rate is at least 8 kbit/s")
    if lane == OUTSIDE:
        # the development box uploads on its own end, downloads what the jump host's end sends
        if up is not None:
            cmds.append(["tc", *plan.tbf_cmd(dev_near, up)])
        if down is not None:
            cmds.append([*inside, "tc", *plan.tbf_cmd(dev_far, down)])
        return cmds
    if down is not None:
        cmds.append([*near, "tc", *plan.tbf_cmd(dev_near, down)])
    if up is not None:
        cmds.append([*inside, "tc", *plan.tbf_cmd(dev_far, up)])
    return cmds


def shape(info: BoxInfo, lane: str, off: str | None, up: int | None, down: int | None) -> str:
    if off is not None and off != "off":
        raise UsageError(f"unexpected {off!r}: give `off`, or --up/--down KBIT")
    from rig.box import netns, state

    st = state.read_state(info.dir)
    guest = st is not None and st.lanes_kind != "netns" and lane in info.hosts
    pid = netns.lane_pid(info, lane) if guest else None
    cmds = shape_cmds(info, lane, off == "off", up, down, pid)
    for c in cmds:
        cp = subprocess.run(c, capture_output=True, text=True)
        if cp.returncode != 0 and off != "off":
            raise NevError(f"tc failed on {lane}: {cp.stderr.strip()}")
    if off == "off":
        return f"{lane}: link not shaped"
    return f"{lane}: up {up or '-'} kbit/s, down {down or '-'} kbit/s (tbf)"
