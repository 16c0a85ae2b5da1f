"""Talking to a stand-in pool's control endpoint (delay, tokens/s, 429/503/hang, bank)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def control(url: str, **settings: Any) -> dict:
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
