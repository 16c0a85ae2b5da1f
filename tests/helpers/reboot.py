"""A box lane rebooted as a real lane reboots: from inside, by the guest's own init."""

from __future__ import annotations

import time

from rig.box import guests, state
from rig.box.netns import run_in


def boots(box) -> bool:
    """LXC lanes boot their own init; netns lanes (NEV_BOX_LANES=netns) cannot."""
    st = state.read_state(box.dir)
    return st is not None and st.lanes_kind == "lxc"


def reboot_lane(box, lane_name: str, timeout: float = 60) -> float:
    """`reboot` as the guest's root; returns once a new init runs (seconds taken). The box does
    nothing: what comes back after it is the lane's own doing."""
    before = guests.init_pid(box.dir, lane_name)
    assert before is not None, f"{lane_name} is not running"
    t0 = time.monotonic()
    cp = run_in(box, lane_name, ["/sbin/reboot"])
    while guests.init_pid(box.dir, lane_name) in (before, None):
        assert time.monotonic() - t0 < timeout, f"{lane_name} did not reboot: {cp.stderr}"
        time.sleep(0.1)
    return time.monotonic() - t0
