"""`nev box shape`: a token-bucket filter on a lane's link, one direction per veth end.

The root-side veth's egress is what the lane downloads; the lane's own eth0 egress is what it
uploads. tbf counts headers: for a payload rate, set about 4.6% above it.
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

from lanes.errors import NevError, UsageError
from rig.box import plan

if TYPE_CHECKING:
    from rig.box.state import BoxInfo


def shape_cmds(info: BoxInfo, lane: str, off: bool, up: int | None, down: int | None,
               guest_pid: int | None = None) -> list[list[str]]:
    """The tc command lines (pure, so the decision is testable). An LXC lane (`guest_pid`, its
    init) has no named namespace: its side is reached with nsenter."""
    h = info.hosts.get(lane)
    if h is None or h["role"] != "lane":
        names = [n for n, x in info.hosts.items() if x["role"] == "lane"]
        raise UsageError(f"{lane!r} is not a lane of box {info.name}; pick one of {', '.join(names)}")
    veth, ns = h["netns"], h["netns"]
    inside = ["nsenter", "-t", str(guest_pid), "-n", "--"] if guest_pid else ["ip", "netns", "exec", ns]
    if off:
        return [["tc", "qdisc", "del", "dev", veth, "root"],
                [*inside, "tc", "qdisc", "del", "dev", "eth0", "root"]]
    if up is None and down is None:
        raise UsageError("give --up KBIT and/or --down KBIT, or `off`")
    cmds = []
    for kbit, flag in ((up, "--up"), (down, "--down")):
        if kbit is not None and kbit < 8:
            raise UsageError(f"{flag} {kbit}: a rate is at least 8 kbit/s")
    if down is not None:
        cmds.append(["tc", *plan.tbf_cmd(veth, down)])
    if up is not None:
        cmds.append([*inside, "tc", *plan.tbf_cmd("eth0", up)])
    return cmds


def shape(info: BoxInfo, lane: str, off: str | None, up: int | None, down: int | None) -> str:
    if off is not None and off != "off":
        raise UsageError(f"unexpected {off!r}: give `off`, or --up/--down KBIT")
    from rig.box import state

    st = state.read_state(info.dir)
    rec = st.procs.get(f"{lane}.sshd") if st and st.lanes_kind != "netns" else None
    cmds = shape_cmds(info, lane, off == "off", up, down, rec.pid if rec else None)
    for c in cmds:
        cp = subprocess.run(c, capture_output=True, text=True)
        if cp.returncode != 0 and off != "off":
            raise NevError(f"tc failed on {lane}: {cp.stderr.strip()}")
    if off == "off":
        return f"{lane}: link not shaped"
    return f"{lane}: up {up or '-'} kbit/s, down {down or '-'} kbit/s (tbf)"
