"""The real request that says whether a forward is up, made to its local port on 127.0.0.1.

| check | request | up when |
|---|---|---|
| forge | GET / | any HTTP answer below 500 (the forge answers 401 without credentials) |
| gateway | GET /health/liveliness | HTTP 200 |
| tcp | connect, then wait QUIET s | the connection stays open or the far end speaks |

An ssh client accepts on its local port even when the jump host cannot reach the target;
it then closes the connection at once. So `tcp` counts an immediate close as down, and the
HTTP checks need a real answer.
"""

from __future__ import annotations

import http.client
import os
import socket
from dataclasses import dataclass

TIMEOUT = 3.0
QUIET = 0.5
PATHS = {"forge": "/", "gateway": "/health/liveliness"}


@dataclass(frozen=True)
class Answer:
    up: bool
    detail: str  # "HTTP 401", "connection refused", ...


def judge(check: str, status: int) -> bool:
    """Whether an HTTP status means the forward is up, for that check (pure)."""
    if check == "gateway":
        return status == 200
    return status < 500


def probe(check: str, port: int, timeout: float = TIMEOUT) -> Answer:
    try:
        if check == "tcp":
            return _tcp(port, timeout)
        return _http(check, port, timeout)
    except ConnectionRefusedError:
        return Answer(False, "connection refused (nothing listens)")
    except TimeoutError:
        return Answer(False, f"no answer within {timeout:.0f} s")
    except (http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine):
        return Answer(False, "closed without an answer (the jump host could not reach the target?)")
    except OSError as e:
        return Answer(False, e.strerror or type(e).__name__)


def _http(check: str, port: int, timeout: float) -> Answer:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", PATHS[check], headers={"Connection": "close"})
        status = conn.getresponse().status
    finally:
        conn.close()
    return Answer(judge(check, status), f"HTTP {status}")


def _tcp(port: int, timeout: float) -> Answer:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(QUIET)
        try:
            data = s.recv(1)
        except TimeoutError:
            return Answer(True, "connected")
    return Answer(True, "connected, answered") if data else Answer(False, "closed at once (the jump host "
                                                                            "could not reach the target?)")


def listener_inodes(port: int) -> set[str]:
    """The socket inodes listening on `port` (any local address), from /proc/net/tcp{,6}."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table, encoding="ascii").read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            parts = ln.split()
            if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                found.add(parts[9])
    return found


def held_by(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on `port` (its own forward, not another
    program that took the port)."""
    inodes = listener_inodes(port)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False
