"""Waiting until a box daemon answers: a port that listens, an HTTP route that answers; the
wait fails at once when the daemon's recorded process exits (`lanes.base.procs`).
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from lanes.base.errors import NevError
from lanes.base.procs import ProcRec, alive

# Never through an HTTP proxy from the environment: box traffic stays on the bridge.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _wait(answers: Callable[[], bool], who: str, doing: str, timeout: float, rec: ProcRec | None,
          log: Path | None, every: float) -> None:
    """Poll `answers` until it is true; fail when the recorded process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while not answers():
        if rec is not None and not alive(rec):
            raise NevError(f"{rec.key} exited while starting; see {log or 'its log'}")
        if time.monotonic() > deadline:
            raise NevError(f"{rec.key if rec else who} did not {doing} within {timeout:.0f} s; "
                           f"see {log or 'its log'}")
        time.sleep(every)


def wait_port(addr: str, port: int, timeout: float, rec: ProcRec | None = None, log: Path | None = None) -> None:
    _wait(lambda: port_open(addr, port), addr, f"listen on {addr}:{port}", timeout, rec, log, 0.03)


def wait_http(url: str, timeout: float, rec: ProcRec | None = None, log: Path | None = None) -> None:
    _wait(lambda: http_answers(url), url, f"answer {url}", timeout, rec, log, 0.1)


def http_answers(url: str) -> bool:
    """Any answer but a server error (5xx)."""
    try:
        with _OPENER.open(url, timeout=2) as r:
            return bool(r.status < 500)
    except urllib.error.HTTPError as e:
        return e.code < 500
    except OSError:
        return False


def port_open(addr: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False
