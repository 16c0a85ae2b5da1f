"""HAProxy's runtime API on the proxy host, reached over SSH like every rig host.

The proxy role's `admin` command (on the rig `socat stdio /run/haproxy/admin.sock`) gets one
command on stdin and prints HAProxy's answer. Server states change here with no config edit
and no reload: `set server BACKEND/SERVER state ready|drain|maint`.
"""

from __future__ import annotations

from dataclasses import dataclass

from lanes.base.errors import NevError
from lanes.base.ssh import Connection

STATES = ("ready", "drain", "maint")


class AdminError(NevError):
    pass


@dataclass(frozen=True)
class Server:
    """One server line as `show stat` reports it."""

    backend: str
    name: str
    status: str        # UP, DOWN, DRAIN, MAINT, `no check` ...
    scur: int          # sessions now
    qcur: int          # requests waiting in this server's own queue
    slim: int          # its maxconn (0: none)
    weight: int

    @property
    def in_flight(self) -> int:
        return self.scur + self.qcur

    @property
    def ready(self) -> bool:
        """Taking new calls: up (with or without checks), neither drained nor in maintenance."""
        return self.status.startswith("UP") or self.status == "no check"

    @property
    def state(self) -> str:
        """How an operator reads it: ready, drained, stopped (maintenance) or down."""
        if self.ready:
            return "ready"
        if "DRAIN" in self.status:
            return "drained"
        if "MAINT" in self.status:
            return "stopped"
        return "down"


def _int(v: str | None) -> int:
    try:
        return int(v or 0)
    except ValueError:
        return 0


def parse_stat(text: str) -> list[Server]:
    """`show stat` CSV -> every server line (frontends and backend totals left out)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise AdminError(f"HAProxy's `show stat` answered no CSV header: {text.strip()[:200] or 'nothing'}")
    head = lines[0][2:].split(",")
    out = []
    for ln in lines[1:]:
        row = dict(zip(head, ln.split(","), strict=False))
        if not ln.strip() or row.get("svname") in ("FRONTEND", "BACKEND"):
            continue
        out.append(Server(backend=row.get("pxname", ""), name=row.get("svname", ""), status=row.get("status", ""),
                          scur=_int(row.get("scur")), qcur=_int(row.get("qcur")), slim=_int(row.get("slim")),
                          weight=_int(row.get("weight"))))
    return out


class Admin:
    """The runtime API of one proxy host."""

    def __init__(self, conn: Connection, admin: str, host: str) -> None:
        self.conn, self.admin, self.host = conn, admin, host

    def run(self, command: str) -> str:
        res = self.conn.run(self.admin, stdin=command.encode() + b"\n", timeout=30)
        if res.exit_status != 0:
            raise AdminError(f"HAProxy's runtime API on {self.host} (`{self.admin}`) exited {res.exit_status}: "
                             f"{res.last_err()}")
        return res.out

    def servers(self) -> list[Server]:
        return parse_stat(self.run("show stat"))

    def server(self, backend: str, name: str) -> Server:
        for s in self.servers():
            if s.backend == backend and s.name == name:
                return s
        raise AdminError(f"HAProxy on {self.host} has no server {backend}/{name}; check the rig file's serving "
                         "section against haproxy.cfg")

    def set_state(self, backend: str, name: str, state: str) -> None:
        assert state in STATES
        out = self.run(f"set server {backend}/{name} state {state}").strip()
        if out:   # HAProxy answers nothing when the change is taken
            raise AdminError(f"HAProxy on {self.host} refused `set server {backend}/{name} state {state}`: {out}")
