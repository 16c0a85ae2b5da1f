"""Talking to a stand-in pool's control endpoint (delay, tokens/s, 429/503/hang, bank)."""

from __future__ import annotations

import json
import urllib.request

from rig.box import netns
from rig.box.state import BoxInfo

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def control(url: str, **settings: object) -> dict:
    """POST settings to a pool's /control (GET when none are given); returns its state."""
    if settings:
        req = urllib.request.Request(url, data=json.dumps(settings).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    else:
        req = urllib.request.Request(url)
    with _OPENER.open(req, timeout=10) as r:
        return json.loads(r.read())


def reset(url: str) -> dict:
    req = urllib.request.Request(url + "/reset", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with _OPENER.open(req, timeout=10) as r:
        return json.loads(r.read())


def pool_control(info: BoxInfo, pool: str, replica: str | None = None, **settings: object) -> dict:
    """Set (or read, with no settings) a stand-in pool's delay, tokens_per_s, max_inflight,
    fail ("429" | "503" | "hang" | None), fail_times, bank; `reset=True` restores defaults.
    `replica` names one of a many-replica pool's (default: its first). The control route is
    the box's own: it is reached from inside the rig network."""
    pi = info.pools[pool]
    url = pi.control_url if replica is None else f"http://{pi.addr}:{pi.replicas[replica]}/control"
    with netns.inside(info.rig_netns):
        if settings.pop("reset", False):
            reset(url)
        return control(url, **settings)
